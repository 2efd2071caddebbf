"""Bad input to the commands (issue 39): a clear one-line error before any work, never a
traceback, never a silently wrong result.

In process where the command allows it (argparse CLIs), as the user's command otherwise.
"""

from __future__ import annotations

import importlib
import io
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from mmc_jax import export, launch, play
from mmc_jax.infra import checkpoint

# ---------------------------------------------------------------------------------------------
# launch: a command must start with a program


@pytest.mark.parametrize(
    "target",
    [
        ["tpu", "--name", "x", "--zone", "z", "--accelerator-type", "v4-8"],
        ["batch", "--name", "x", "--location", "l", "--image", "i", "--seeds", "0"],
        ["gke", "--name", "x", "--image", "i", "--tpu-type", "v5litepod-16"],
        ["local", "--processes", "2"],
    ],
)
def test_launch_refuses_a_command_of_flags_alone(capsys, tmp_path, monkeypatch, target):
    """`launch ... -- --config configs/joat.py` (the program forgotten) would print and run a
    cluster job whose command is `--config ...`: refused with one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        launch.main([*target, "--dry-run", "--", "--config", "configs/joat.py", "--workdir", "w"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not list(tmp_path.iterdir())
    last = captured.err.strip().splitlines()[-1]
    assert "the command must start with a program" in last and "'--config'" in last, last


# ---------------------------------------------------------------------------------------------
# play: the PGN path is checked before the game


def test_play_checks_the_pgn_path_before_the_game(tmp_path, capsys):
    """`play --pgn` into a missing folder: refused before the game is played (it used to play
    the whole game, then end in a traceback with the PGN never written)."""
    missing = tmp_path / "no" / "such" / "game.pgn"
    stdin = io.StringIO("quit\n")
    stdout = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        play.main(
            ["--variant", "gardner", "--checkpoint", "none", "--simulations", "0"]
            + ["--pgn", str(missing)],
            stdin=stdin,
            stdout=stdout,
        )
    assert exit_info.value.code == 2
    assert stdout.getvalue() == "" and stdin.read() == "quit\n"  # no game was started
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--pgn {missing}: the folder {missing.parent} does not exist" in err


# ---------------------------------------------------------------------------------------------
# export of an exported (shipped) model


def test_export_of_a_shipped_model_copies_it_with_its_provenance(tmp_path, capsys):
    """`export --checkpoint gardner-cpu` ended in a traceback (it looked for the checkpoints of
    a folder that has none); it writes a copy whose card keeps the original's step, frames
    and command and says what it was copied from."""
    out = tmp_path / "copy"
    assert export.main(["--checkpoint", "gardner-cpu", "--out", str(out)]) == 0
    shipped = json.loads(
        (Path(checkpoint.shipped_models()["gardner-cpu"]) / checkpoint.EXPORT_FILE).read_text()
    )
    record = json.loads((out / checkpoint.EXPORT_FILE).read_text())
    for key in ("source", "step", "frames", "games", "command", "description"):
        assert record[key] == shipped[key], key
    assert record["copied_from"] == "gardner-cpu"
    assert f"step {shipped['step']} of {shipped['source']}" in capsys.readouterr().out
    _, copied, _ = checkpoint.load_model(out)
    _, original, _ = checkpoint.load_model("gardner-cpu")
    for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(original), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------------------------------------
# train: an absurd batch size is refused before anything is allocated


@pytest.mark.parametrize("name", ["alphazero", "joat"])
def test_an_absurd_batch_size_is_refused_with_the_memory_it_needs(tmp_path, monkeypatch, name):
    """`selfplay.batch_size=10**7` used to build ten million games' rules for minutes before
    anything failed; the state's size is estimated first (from two small batch sizes: the
    state is affine in it) and the run refused with one line that gives the estimate."""
    from configs import gardner, joat
    from mmc_jax.algorithms import alphazero, meta
    from mmc_jax.training import runloop

    algorithm, config = {
        "alphazero": (alphazero.ALGORITHM, gardner.get_config("smoke")),
        "joat": (meta.ALGORITHM, joat.get_config("smoke")),
    }[name]
    field = algorithm.batch_field
    section, key = field.split(".")
    config[section][key] = 10**7

    def no_games(*args, **kwargs):
        raise AssertionError("the games were built before the memory check")

    monkeypatch.setattr(algorithm, "setup", no_games)
    started = time.time()
    with pytest.raises(ValueError) as error:
        runloop.run(algorithm, config, tmp_path / "run", stream=None)
    message = str(error.value)
    assert time.time() - started < 60
    assert message.startswith(f"{field}=10000000: the training state alone needs about "), message
    assert re.search(r"needs about [\d.]+ [GT]iB per device .* more than the [\d.]+ GiB", message)
    assert message.endswith(f"; lower {field}"), message
    assert "\n" not in message and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["alphazero", "joat"])
def test_the_memory_estimate_is_the_state_size(name):
    """The estimate extrapolated from two small batch sizes is the abstract state's size."""
    import math

    from configs import gardner, joat
    from mmc_jax.algorithms import alphazero, meta
    from mmc_jax.training import runloop

    algorithm, module = {
        "alphazero": (alphazero.ALGORITHM, gardner),
        "joat": (meta.ALGORITHM, joat),
    }[name]
    config = algorithm.prepare_config(module.get_config("smoke"))
    mesh = algorithm.make_mesh(config)
    exact = sum(
        math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(algorithm.abstract_state(config, mesh))
    )
    assert runloop.state_bytes_per_device(algorithm, config, mesh, extrapolate=True) == exact


# ---------------------------------------------------------------------------------------------
# docs/errors.md: every command's bad input, kept true

ROOT = Path(__file__).resolve().parents[2]
ERRORS_DOC = ROOT / "docs" / "errors.md"
LEGACY = ROOT / "tests" / "fixtures" / "legacy" / "gardner_smoke"
IN_PROCESS = {"analyse", "evaluate", "export", "launch", "play"}  # argparse: main(argv)
PLACEHOLDERS = (
    "RUN", "DAMAGED", "UNREADABLE", "MODEL", "TORN", "BUSY", "LINKED", "FILE", "MISSING", "OUT",
    "PORT",
)  # fmt: skip


def _code(cell: str) -> str:
    cell = cell.strip()
    if cell.startswith("``"):
        return cell[2:-2].strip()
    assert cell.startswith("`") and cell.endswith("`"), cell
    return cell[1:-1]


def error_table() -> list[tuple[str, str, str, int]]:
    """(input, command, message, exit status) of every row of docs/errors.md's commands table
    (the server's answers, in the next section, are kept true by tests/commands/test_web.py)."""
    rows = []
    for line in ERRORS_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            break
        if not line.startswith("| ") or line.startswith("| Input "):
            continue
        what, command, message, status = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append((what, _code(command), _code(message), int(status)))
    return rows


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The folders the table's placeholders stand for; BUSY is held by another process, LINKED's
    lock is a link to FILE."""
    root = tmp_path_factory.mktemp("errors")
    run = root / "RUN"
    shutil.copytree(LEGACY, run)
    steps = run / "checkpoints"
    shutil.copytree(steps / "1", steps / "2")
    sidecar = steps / "2" / "meta" / "metadata"
    sidecar.write_text(json.dumps(dict(json.loads(sidecar.read_text()), step=2)))
    shutil.copytree(run, root / "DAMAGED")
    (root / "DAMAGED" / "checkpoints" / "2" / "state" / "manifest.ocdbt").unlink()
    shutil.copytree(run, root / "UNREADABLE")
    for path in (root / "UNREADABLE" / "checkpoints" / "2" / "state").rglob("d/*"):
        path.unlink()
    _, params, config = checkpoint.load_model(run)
    checkpoint.export_model(root / "MODEL", config, params, {"step": 2})
    shutil.copytree(root / "MODEL", root / "TORN")
    torn = root / "TORN" / checkpoint.EXPORT_PARAMS
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    (root / "FILE").write_text("")
    (root / "LINKED").mkdir()
    (root / "LINKED" / "lock.json").symlink_to(root / "FILE")
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_AND_SLEEP, str(root / "BUSY")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert holder.stdout.readline() == "HELD\n"
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    places = {name: str(root / name) for name in PLACEHOLDERS}
    yield dict(places, PORT=str(listening.getsockname()[1]))
    listening.close()
    holder.kill()
    holder.communicate()


LOCK_AND_SLEEP = """
import sys, time
from mmc_jax.infra import storage
with storage.workdir_lock(sys.argv[1]):
    print("HELD", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(
    "what, command, message, status",
    error_table(),
    ids=[f"{c.split()[2].split('.')[1]}: {w}" for w, c, _, _ in error_table()],
)
def test_the_error_table_is_true(places, tmp_path, capsys, what, command, message, status):
    paths = dict(places, OUT=str(tmp_path / "out"))
    word = re.compile(r"\b(" + "|".join(PLACEHOLDERS) + r")\b")

    def fill(text: str) -> str:
        return word.sub(lambda found: paths[found.group(1)], text)

    argv = shlex.split(fill(command))
    assert argv[:2] == ["python", "-m"], command
    module = argv[2].split(".")[1]
    if module in IN_PROCESS:
        main = importlib.import_module(f"mmc_jax.{module}").main
        extra = {"stdin": io.StringIO(""), "stdout": io.StringIO()} if module == "play" else {}
        try:
            code = main(argv[3:], **extra)
        except SystemExit as exit_info:
            code = exit_info.code
        code = code or 0
        err = capsys.readouterr().err
    else:
        done = subprocess.run(
            [sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        code, err = done.returncode, done.stderr
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1] if err.strip() else ""
    pattern = re.escape(fill(message)).replace("…", ".*")
    assert re.fullmatch(pattern, last), f"\n  table: {fill(message)}\n  got:   {last}"
    assert code == status, err
