"""`python -m mmc_jax.train` writes a meta-training run's task list to its workdir (issue 51:
the start-up line of a JOAT run over the rule space listed every task, 3,103 characters)."""

from __future__ import annotations

from configs import joat
from mmc_jax import train
from mmc_jax.algorithms import meta


def test_the_task_list_is_written_to_the_workdir(tmp_path):
    config = joat.get_config("smoke")
    config.unlock()
    meta.prepare_meta_config(config)
    path = train.write_task_list(config, tmp_path)
    lines = (tmp_path / train.TASKS_FILE).read_text().splitlines()
    assert str(path).endswith(train.TASKS_FILE)
    assert lines[0].startswith(f"# {len(config.variants)} tasks of ")
    assert [line.split("\t")[1] for line in lines[1:]] == list(config.variants)
    weights = meta.task_weights(config)
    assert all(
        float(w) == float(f"{weights[v]:.4g}") for w, v in (x.split("\t") for x in lines[1:])
    )
