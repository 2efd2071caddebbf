"""`python -m mmc_jax.analyse`: invariance under fog through the CLI, JSON, one-line errors."""

from __future__ import annotations

import json

import pytest

from mmc_jax import analyse

PAIR = ("4k/5/2n2/5/K4 w - - 0 1", "4k/5/4n/5/K4 w - - 0 1")


def _run(capsys, *args):
    code = analyse.main(["--variant", "dark", "--simulations", "8", "--worlds", "2", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_fair_analysis_depends_on_the_observation_only(capsys):
    results = []
    for fen in PAIR:
        code, out, _ = _run(capsys, "--fen", fen, "--json", "--seed", "5")
        assert code == 0
        results.append(json.loads(out))
    assert results[0]["policy"] == results[1]["policy"]
    assert results[0]["value"] == results[1]["value"]
    assert set(results[0]["policy"]) == {"a1a2", "a1b1", "a1b2"}
    assert sum(results[0]["policy"].values()) == pytest.approx(1.0, abs=1e-5)
    assert "untrained" in results[0]["network"] and results[0]["mode"] == "fair PIMC"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fen", "bad"], "malformed FEN"),
        (["--fen", PAIR[0], "--variant", "nope"], "unknown variant"),
        (["--fen", PAIR[0], "--checkpoint", "/nonexistent/run"], "cannot load checkpoint"),
        # A FEN without Black's king: refused by the analysis, once the network is built.
        pytest.param(["--fen", "5/5/5/5/K4 w - - 0 1"], "error:", marks=pytest.mark.slow),
    ],
)
def test_bad_input_is_one_line(capsys, args, message):
    code, out, err = _run(capsys, *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
