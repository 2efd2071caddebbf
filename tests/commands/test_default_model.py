"""The shipped model `play`, `serve` and `engine` use by default: one table
(`checkpoint.DEFAULT_MODELS`), read by all three."""

from __future__ import annotations

import argparse

from mmc_jax import engine, play, serve
from mmc_jax.infra import checkpoint


def test_the_default_is_the_tables_shipped_model_else_the_variants_cpu_model(monkeypatch):
    assert checkpoint.default_model("gardner") == checkpoint.DEFAULT_MODELS["gardner"]
    assert checkpoint.default_model("gardner") in checkpoint.shipped_models()
    assert checkpoint.default_model("atomic") == "atomic-supervised"
    assert checkpoint.default_model("atomic") in checkpoint.shipped_models()
    assert checkpoint.default_model("extinction") == "extinction-supervised"
    assert checkpoint.default_model("baby") is None  # nothing shipped for it
    monkeypatch.setitem(checkpoint.DEFAULT_MODELS, "gardner", "joat-cpu")
    assert checkpoint.default_model("gardner") == "joat-cpu"
    monkeypatch.setitem(checkpoint.DEFAULT_MODELS, "gardner", "not-shipped")
    assert checkpoint.default_model("gardner") == "gardner-cpu"


def test_engine_serve_and_play_default_to_it():
    """play takes the variant's model; engine and serve, without --model, each variant's
    (test_uci_serve.py plays the engine's swap), with --model that one for every variant."""
    default = checkpoint.default_model("gardner")
    assert engine._parser().parse_args([]).model is None
    assert serve._parser().parse_args([]).model is None
    own = {"atomic": "atomic-supervised", "extinction": "extinction-supervised"}
    assert serve.variant_models_for(None) == own
    assert serve.variant_models_for("gardner-cpu") == {}
    models = serve.find_models(default, [])
    app = serve.Server(models, default, variant_models=serve.variant_models_for(None))
    assert app.options()["variant_models"] == own
    assert app.model_for("atomic", {}) == "atomic-supervised"
    assert app.model_for("extinction", {}) == "extinction-supervised"
    assert app.model_for("gardner", {}) == app.model_for("baby", {}) == default
    assert app.model_for("atomic", {"model": "gardner-cpu"}) == "gardner-cpu"
    args = argparse.Namespace(variant="gardner", checkpoint=None, step=None, simulations=0)
    player = play._model_player(argparse.ArgumentParser(), args)
    assert args.checkpoint == default and player.name == default


def test_a_folder_named_like_a_shipped_model_shadows_it_only_if_it_holds_a_model_or_a_run(
    tmp_path, monkeypatch, capsys
):
    """`evaluate ladder --checkpoint gardner-cpu` writes `ladder-gardner-cpu/`, not a folder
    named like the model; and a folder of outputs named like a shipped model (an older
    version's ladder) no longer hides it from `serve`, `engine` and `play` (issue 70)."""
    from mmc_jax import evaluate
    from mmc_jax.infra import checkpoint

    monkeypatch.chdir(tmp_path)
    (tmp_path / "gardner-cpu" / "ladder").mkdir(parents=True)  # what older versions wrote
    shipped = checkpoint.shipped_models()["gardner-cpu"]
    assert checkpoint.resolve_model_path("gardner-cpu") == shipped
    assert checkpoint.open_model("gardner-cpu").config.network.num_blocks >= 1
    status = evaluate.main(
        [
            "ladder", "--variant", "gardner", "--checkpoint", "gardner-cpu", "--no-engine",
            "--games", "2", "--chain-games", "0", "--max-plies", "12", "--bootstrap", "0",
            "--json",
        ]
    )  # fmt: skip
    capsys.readouterr()
    assert status == 0 and (tmp_path / "ladder-gardner-cpu" / "ladder.json").is_file()
    assert sorted(p.name for p in (tmp_path / "gardner-cpu").iterdir()) == ["ladder"]
    (tmp_path / "gardner-cpu" / "checkpoints").mkdir()  # a run of that name is the user's own
    assert checkpoint.resolve_model_path("gardner-cpu") == "gardner-cpu"
