"""The suite's own scheduling under pytest-xdist: the tests that share the compiled smoke runs
(`runs_support.SHARED_RUN_FIXTURES`) run in one worker, so each shared run (and the multi-process
launch, a module fixture over them) is built once per suite, not once per worker.

pytest 9.2 broke this silently with pytest-xdist 3.8 (xdist writes the `@group` suffix into a node
attribute 9.2 no longer reads): every worker compiled the shared runs, and the 2-process launch ran
twice (666 s and 582 s of setup in one CI run). pyproject.toml bounds pytest; this test fails when
the installed pair does not group, whatever the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import importlib.util, sys
import pytest

sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
import runs_support

# The suite's scheduling hooks, and nothing else of its plugins.
pytest_cmdline_main = suite.pytest_cmdline_main
pytest_configure_node = suite.pytest_configure_node
pytest_collection_modifyitems = runs_support.pytest_collection_modifyitems


@pytest.fixture(scope="session")
def runs():
    return None
"""

TESTS_FILE = """
import os
import pytest

@pytest.fixture(scope="module")
def launch(runs, tmp_path_factory):
    with open(os.environ["SETUPS"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_shared(launch, i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
"""


def test_tests_sharing_the_smoke_runs_run_in_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(TESTS_FILE))
    setups = tmp_path / "setups.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-v", "."],
        cwd=tmp_path,
        env={**os.environ, "SETUPS": str(setups), "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "LoadGroupScheduling" in result.stdout, result.stdout[-2000:]
    # One worker set the module fixture up, once: its six tests were sent together.
    assert setups.read_text().split() in (["gw0"], ["gw1"]), setups.read_text()
    passed = [line for line in result.stdout.splitlines() if "PASSED" in line]
    assert sum("test_shared[" in line and "@runs" in line for line in passed) == 6, passed
