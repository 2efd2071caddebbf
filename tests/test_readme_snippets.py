"""The code the README and docs/rules.md show runs as written (issue 67 item 6): the README's
rules snippet (the pgx face) and docs/rules.md's API snippet (a mixed batch), each executed in
a fresh process from the repository root, its printed shape checked."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def test_the_readmes_rules_snippet_runs_as_written():
    pytest.importorskip("pgx", reason="the pgx face needs pgx (the test extra)")
    (snippet,) = [b for b in python_blocks(ROOT / "README.md") if "pgx_env" in b]
    done = run(snippet)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(1024, 5, 5, 27)"


def test_the_rules_docs_api_snippet_runs_as_written():
    (snippet,) = [b for b in python_blocks(ROOT / "docs" / "rules.md") if "R.batch" in b]
    done = run(snippet + "\nprint(obs.shape, bool(state.terminated.dtype == bool))\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(4096, 5, 5, 27) True"
