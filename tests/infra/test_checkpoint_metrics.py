"""Tests for mmc_jax.infra.checkpoint and mmc_jax.infra.metrics (no compiled code: fast)."""

import io
import json
import logging
import os
import sys
import warnings

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from mmc_jax.infra import checkpoint, metrics
from mmc_jax.model import network
from mmc_jax.training import learner

OBS_SHAPE = (5, 5, 6)


def run_config(channels: int = 8, variants=("gardner", "atomic")) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.variants = list(variants)
    config.network = ml_collections.ConfigDict(
        dict(num_blocks=1, channels=channels, policy_channels=4, value_channels=2, value_hidden=8)
    )
    config.learner = ml_collections.ConfigDict(dict(optimizer="adam", learning_rate=1e-3))
    return config


def train_state(config: ml_collections.ConfigDict, fill: float, iteration: int) -> dict:
    """A {params, opt_state, iteration} state with the real network's shapes.

    Values are constants from `eval_shape`: random initialisation compiles slowly on CPU and is
    irrelevant to checkpointing.
    """
    net = network.make_network(config.network)
    shapes = jax.eval_shape(lambda key: network.init_params(net, key, OBS_SHAPE), jax.random.key(0))
    params = jax.tree.map(lambda s: jnp.full(s.shape, fill, s.dtype), shapes)
    opt_state = learner.make_optimizer(config.learner).init(params)
    return {"params": params, "opt_state": opt_state, "iteration": iteration}


def test_round_trip_latest_step_and_max_to_keep(tmp_path):
    config = run_config()
    assert checkpoint.restore_or_none(tmp_path, train_state(config, 0.0, 0)) is None
    assert checkpoint.latest_step(tmp_path) is None

    with checkpoint.Checkpointer(tmp_path, max_to_keep=2) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(
                step,
                train_state(config, float(step), step),
                config=config,
                extra={"frames": 100 * step},
            )
        ckpt.wait()
        assert ckpt.all_steps() == [2, 3]  # max_to_keep dropped step 1
        assert ckpt.latest_step() == 3

    template = train_state(config, 0.0, 0)
    restored = checkpoint.restore_or_none(tmp_path, template, config=config)
    assert restored["iteration"] == 3
    chex.assert_trees_all_close(restored["params"], train_state(config, 3.0, 3)["params"])
    chex.assert_trees_all_equal_structs(restored["opt_state"], template["opt_state"])
    older = checkpoint.restore_checkpoint(tmp_path, template, step=2)
    assert older["iteration"] == 2

    meta = checkpoint.load_metadata(tmp_path)
    assert meta["step"] == 3 and meta["extra"] == {"frames": 300}
    assert meta["config"]["variants"] == ["gardner", "atomic"]
    assert meta["config"]["network"]["channels"] == 8
    assert set(meta["versions"]) >= {"jax", "flax", "mmc_jax"}
    sidecar = tmp_path / checkpoint.CHECKPOINT_SUBDIR / "3" / "meta" / "metadata"
    assert json.loads(sidecar.read_text())["step"] == 3  # plain JSON on disk


def test_keep_period_keeps_every_multiple_beyond_max_to_keep(tmp_path):
    config = run_config()
    with checkpoint.Checkpointer(tmp_path, max_to_keep=2, keep_period=3) as ckpt:
        for step in range(1, 11):
            ckpt.save(step, train_state(config, float(step), step), config=config)
        ckpt.wait()
        assert ckpt.all_steps() == [3, 6, 9, 10]  # the last two, and the multiples of 3
    template = train_state(config, 0.0, 0)
    assert checkpoint.restore_checkpoint(tmp_path, template, step=3)["iteration"] == 3


def test_one_shot_save_and_missing_step(tmp_path):
    config = run_config()
    checkpoint.save_checkpoint(tmp_path, 5, train_state(config, 5.0, 5), config=config)
    assert checkpoint.latest_step(tmp_path) == 5
    with pytest.raises(FileNotFoundError, match="step 4"):
        checkpoint.restore_checkpoint(tmp_path, train_state(config, 0.0, 0), step=4)
    with pytest.raises(FileNotFoundError):
        checkpoint.load_metadata(tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere").exists()  # reading does not create directories


def test_restore_into_other_network_shape_raises(tmp_path):
    checkpoint.save_checkpoint(
        tmp_path, 1, train_state(run_config(channels=8), 1.0, 1), config=run_config(channels=8)
    )
    wider = run_config(channels=16)
    with pytest.raises(ValueError, match=r"'network\.channels': checkpoint has 8, config has 16"):
        checkpoint.restore_or_none(tmp_path, train_state(wider, 0.0, 0), config=wider)
    # Without a config the per-leaf shape check still names the offending arrays.
    with pytest.raises(ValueError, match=r"Conv_0.*kernel.*checkpoint shape \(3, 3, 6, 8\)"):
        checkpoint.restore_or_none(tmp_path, train_state(wider, 0.0, 0))


def test_restore_with_other_variant_list_raises(tmp_path):
    config = run_config(variants=("gardner", "atomic"))
    checkpoint.save_checkpoint(tmp_path, 1, train_state(config, 1.0, 1), config=config)
    other = run_config(variants=("gardner", "dark"))
    with pytest.raises(ValueError, match="'variants'.*'atomic'.*'dark'"):
        checkpoint.restore_or_none(tmp_path, train_state(other, 0.0, 0), config=other)


def test_config_changes_lists_the_fields_a_step_was_trained_with_otherwise():
    """What the NaN guard names when a resume under another config diverges (issue 52, item
    4): the sidecar's config against the run's, tuples equal to lists, prefixes ignored."""
    saved = {"seed": 0, "num_iterations": 2, "learner": {"learning_rate": 0.001, "steps": 4},
             "variants": ["gardner"], "checkpoint": {"every": 1}}  # fmt: skip
    config = ml_collections.ConfigDict(
        {"seed": 0, "num_iterations": 9, "learner": {"learning_rate": 1e30, "steps": 4},
         "variants": ("gardner",), "checkpoint": {"every": 5}, "new": True}
    )  # fmt: skip
    assert checkpoint.config_changes(saved, config, ("num_iterations", "checkpoint")) == [
        ("learner.learning_rate", 0.001, 1e30),
        ("new", None, True),
    ]
    assert checkpoint.config_changes(None, config) == []
    assert ("num_iterations", 2, 9) in checkpoint.config_changes(saved, config)


def test_a_state_of_another_tree_structure_is_a_mismatch_not_damage(tmp_path):
    # Same arrays and shapes, one more None entry: what a state class that gains an optional
    # field restores into. Orbax refuses it; that must read as a mismatch (resume with the
    # code that wrote it), never as damaged files (whose fallback would walk past every step).
    config = run_config()
    saved = train_state(config, 1.0, 1)
    checkpoint.save_checkpoint(tmp_path, 1, saved, config=config)
    grown = dict(train_state(config, 0.0, 0), extra={"pending": None})
    with pytest.raises(checkpoint.CheckpointMismatch, match=r"another tree structure.*extra"):
        checkpoint.restore_or_none(tmp_path, grown, config=config)
    restored = checkpoint.restore_or_none(tmp_path, train_state(config, 0.0, 0), config=config)
    assert restored["iteration"] == 1


# ---------------------------------------------------------------------------------------------
# Metrics


def test_metrics_writer_and_truncated_last_line(tmp_path):
    stream = io.StringIO()
    with metrics.MetricsWriter(tmp_path, stream=stream) as writer:
        for step in range(3):
            writer.write(
                step,
                {
                    "frames": 1000 * step,
                    "train/policy_loss": jnp.float32(2.0 - step),
                    "train/gardner/value_loss": np.float32(0.5),
                },
            )
    assert "train/policy_loss 2" in stream.getvalue().splitlines()[0]
    assert "gardner" not in stream.getvalue()  # per-variant keys stay off the progress line
    assert os.listdir(tmp_path / metrics.TENSORBOARD_SUBDIR)

    path = tmp_path / metrics.METRICS_FILE
    with open(path, "a") as f:
        f.write('{"step": 3, "frames": 30')  # SIGKILL mid-write
    records = metrics.read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records[1]["train/policy_loss"] == 1.0

    # Reopening repairs the tail before appending, so the next record is not glued onto it.
    with metrics.MetricsWriter(tmp_path, tensorboard=False, stream=None) as writer:
        writer.write(3, {"frames": 3000})
    assert [r["step"] for r in metrics.read_metrics(tmp_path)] == [0, 1, 2, 3]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_metrics_writer_resume_drops_later_records(tmp_path):
    with metrics.MetricsWriter(tmp_path, tensorboard=False, stream=None) as writer:
        for step in range(5):
            writer.write(step, {"x": step})
    with metrics.MetricsWriter(tmp_path, resume_step=2, tensorboard=False, stream=None) as writer:
        writer.write(3, {"x": 30})
    assert [(r["step"], r["x"]) for r in metrics.read_metrics(tmp_path)] == [
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 30),
    ]


def test_disabled_writer_writes_nothing(tmp_path):
    writer = metrics.MetricsWriter(tmp_path / "run", enabled=False)
    writer.write(0, {"x": 1.0})
    writer.close()
    assert not (tmp_path / "run").exists()


def test_plot_metrics_writes_pngs(tmp_path):
    with metrics.MetricsWriter(tmp_path, tensorboard=False, stream=None) as writer:
        for step in range(4):
            writer.write(
                step,
                {
                    "frames": 512 * step,
                    "train/policy_loss": 3.0 - 0.5 * step,
                    "train/value_loss": 0.9 - 0.1 * step,
                    "eval/gardner/score_vs_random": 0.5 + 0.1 * step,
                    "eval/atomic/score_vs_random": 0.4 + 0.1 * step,
                    "eval/gardner/score_vs_greedy": 0.2 + 0.05 * step,
                },
            )
    paths = metrics.plot_metrics(tmp_path)
    names = sorted(os.path.basename(p) for p in paths)
    assert names == [
        "policy_loss.png",
        "score_vs_greedy.png",
        "score_vs_random.png",
        "value_loss.png",
    ]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert metrics.plot_metrics(tmp_path / "empty") == []


def test_a_plot_of_many_tasks_keeps_the_whole_runs_legend_and_fits(tmp_path, monkeypatch):
    """A meta-run logs a loss per task (64 in configs/joat.py:quick): the legend held them
    all and matplotlib warned that the layout could not fit; the tasks are now grey lines
    behind the run's own, named once in the legend (issue 51: unexplained grey lines)."""
    with metrics.MetricsWriter(tmp_path, tensorboard=False, stream=None) as writer:
        for step in range(3):
            record = {"frames": 512 * step, "train/policy_loss": 2.0 - 0.1 * step}
            record.update({f"train/task{i}/policy_loss": 2.0 + 0.01 * i for i in range(64)})
            writer.write(step, record)
    legends = []
    save = metrics.save_figure

    def remember(figure, path):
        legends.append([t.get_text() for t in figure.axes[0].get_legend().get_texts()])
        return save(figure, path)

    monkeypatch.setattr(metrics, "save_figure", remember)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics.plot_metrics(tmp_path)
    assert legends == [["train/policy_loss", "each task (64 lines)"]]


# ----------------------------------------------------------------------------- a full disk

TENSORSTORE_FULL = ValueError(  # what orbax re-raises when tensorstore cannot write
    'RESOURCE_EXHAUSTED: Error writing local file "x/_sharding": Failed to write 15416 bytes '
    "to file 16: No space left on device [source locations='tensorstore/util/file.cc:1']"
)


def test_a_full_disk_is_one_line_naming_the_folder_and_the_step_to_resume(tmp_path, monkeypatch):
    config = run_config()
    with checkpoint.Checkpointer(tmp_path, max_to_keep=2) as ckpt:
        ckpt.save(1, train_state(config, 1.0, 1), config=config)
        ckpt.wait()

        def full(self, *args, **kwargs):
            raise TENSORSTORE_FULL

        monkeypatch.setattr(checkpoint.ocp.CheckpointManager, "wait_until_finished", full)
        with pytest.raises(checkpoint.DiskFull) as raised:
            ckpt.wait()
        monkeypatch.undo()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"the disk is full: a checkpoint could not be written to {tmp_path}")
    assert message.endswith("run the same command again: it resumes from step 1")
    assert isinstance(raised.value, OSError)  # the commands' one-line OSError path


def test_a_full_disk_is_recognised_however_it_is_wrapped():
    assert checkpoint.disk_full(OSError(28, os.strerror(28)))
    assert checkpoint.disk_full(TENSORSTORE_FULL)
    try:
        try:
            raise OSError(122, os.strerror(122))  # EDQUOT: a quota is a full disk too
        except OSError as inner:
            raise RuntimeError("save failed") from inner
    except RuntimeError as wrapped:
        assert checkpoint.disk_full(wrapped)
    assert not checkpoint.disk_full(OSError(13, "Permission denied"))
    assert not checkpoint.disk_full(ValueError("RESOURCE_EXHAUSTED: out of memory"))


def test_orbax_tracebacks_of_a_full_disk_are_dropped_and_others_kept(tmp_path):
    checkpoint.Checkpointer(tmp_path).close()  # every Checkpointer installs the filter
    logger = logging.getLogger("absl")

    def record(error):
        try:
            raise error
        except type(error):
            info = sys.exc_info()
        return logger.makeRecord("absl", logging.ERROR, __file__, 1, "save failed", (), info)

    assert not logger.filter(record(TENSORSTORE_FULL))
    assert logger.filter(record(ValueError("another failure")))
