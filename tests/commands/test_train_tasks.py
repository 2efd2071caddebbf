"""A meta-training run writes its task list to its workdir (issue 51: the start-up line of a
JOAT run over the rule space listed every task, 3,103 characters): JOAT's `write_run_files`,
which the run loop calls at every start."""

from __future__ import annotations

from configs import joat
from mmc_jax.algorithms import meta


def test_the_task_list_is_written_to_the_workdir(tmp_path):
    config = joat.get_config("smoke")
    config.unlock()
    meta.prepare_meta_config(config)
    meta.ALGORITHM.write_run_files(config, str(tmp_path))
    lines = (tmp_path / meta.TASKS_FILE).read_text().splitlines()
    assert lines[0].startswith(f"# {len(config.variants)} tasks of ")
    assert [line.split("\t")[1] for line in lines[1:]] == list(config.variants)
    weights = meta.task_weights(config)
    assert all(
        float(w) == float(f"{weights[v]:.4g}") for w, v in (x.split("\t") for x in lines[1:])
    )
