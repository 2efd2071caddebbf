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
    assert checkpoint.default_model("extinction") is None  # nothing shipped for it
    monkeypatch.setitem(checkpoint.DEFAULT_MODELS, "gardner", "joat-cpu")
    assert checkpoint.default_model("gardner") == "joat-cpu"
    monkeypatch.setitem(checkpoint.DEFAULT_MODELS, "gardner", "not-shipped")
    assert checkpoint.default_model("gardner") == "gardner-cpu"


def test_engine_serve_and_play_default_to_it():
    default = checkpoint.default_model("gardner")
    assert engine._parser().parse_args([]).model == default
    assert serve._parser().parse_args([]).model == default
    args = argparse.Namespace(variant="gardner", checkpoint=None, step=None, simulations=0)
    player = play._model_player(argparse.ArgumentParser(), args)
    assert args.checkpoint == default and player.name == default
