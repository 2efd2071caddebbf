"""Packages an accelerator image may lack never stop a run: without tensorboardX the metrics
go to metrics.jsonl and the plots (one note), without pgx a benchmark measures its own arms
(one note), and no command imports pyffish (the tests' oracle) or pgx at start-up."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from mmc_jax.bench import programs
from mmc_jax.bench.__main__ import main as bench_main
from mmc_jax.infra import metrics


@pytest.fixture
def no_tensorboard(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` fails
    metrics.tensorboard_writer_class.cache_clear()
    yield
    metrics.tensorboard_writer_class.cache_clear()


def test_metrics_without_tensorboardx_write_jsonl_and_say_so_once(no_tensorboard, tmp_path, capsys):
    for resume_step in (None, 1):
        writer = metrics.MetricsWriter(tmp_path, resume_step=resume_step, stream=None)
        writer.write(1 if resume_step is None else 2, {"loss": 0.5})
        writer.close()
    records = metrics.read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert not (tmp_path / metrics.TENSORBOARD_SUBDIR).exists()
    err = capsys.readouterr().err
    assert err.count("tensorboardX is not installed") == 1 and "Traceback" not in err


def test_a_benchmark_without_pgx_measures_its_own_arms(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pgx", None)
    built = []

    def mmc_runner(variants, batch, scan_length):
        built.append(("mmc", batch))
        return jax.jit(lambda state, key: state + 1), jnp.zeros((), jnp.int32)

    def pgx_runner(batch, scan_length):  # pragma: no cover - must not be called
        raise AssertionError("the pgx arm ran without pgx")

    monkeypatch.setattr(programs, "mmc_env_runner", mmc_runner)
    monkeypatch.setattr(programs, "pgx_env_runner", pgx_runner)
    bench_main(
        "env --batch-sizes 2 --scan-length 3 --repeats 2 --movegen-batch 0 --vs-pgx --json".split()
    )
    out, err = capsys.readouterr()
    assert "pgx is not installed" in err and "--vs-pgx ignored" in err
    (row,) = json.loads(out.strip().splitlines()[-1])["rows"]
    assert built == [("mmc", 2)] and "ratio" not in row


def test_no_command_imports_pyffish_or_pgx_at_start_up():
    # A fresh interpreter in which both are unimportable imports every command module.
    code = (
        "import sys\n"
        "sys.modules['pyffish'] = None\n"
        "sys.modules['pgx'] = None\n"
        "import mmc_jax.train, mmc_jax.adapt, mmc_jax.evaluate, mmc_jax.play, mmc_jax.analyse\n"
        "import mmc_jax.explore, mmc_jax.export, mmc_jax.bench.__main__, mmc_jax.uci\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
