"""The lab floor (experiments/lab/): the registered statistics against scipy and the package,
the one tar.gz archive format round-tripping with its manifest and refusing what its caller
refuses, and the report helpers' text. No JAX here."""

import math

import pytest
from scipy import stats as scipy_stats

from experiments.lab import archive, report, stats
from mmc_jax.evaluation import elo


def test_t_interval_and_minimum_detectable_effect_are_student_t():
    values = [0.12, -0.03, 0.08, 0.15, 0.02]
    mean, half = stats.t_interval(values)
    sd = stats.standard_deviation(values)
    assert mean == pytest.approx(0.068) and sd == pytest.approx(float(scipy_stats.tstd(values)))
    assert half == pytest.approx(scipy_stats.t.ppf(0.975, 4) * sd / math.sqrt(5))
    assert stats.t_interval([0.3]) == (0.3, 0.0)
    power = scipy_stats.t.ppf(0.975, 4) + scipy_stats.t.ppf(0.8, 4)
    assert stats.minimum_detectable(values) == pytest.approx(power * sd / math.sqrt(5))
    at_10 = (scipy_stats.t.ppf(0.975, 9) + scipy_stats.t.ppf(0.8, 9)) * sd / math.sqrt(10)
    assert stats.minimum_detectable(values, 10) == pytest.approx(at_10)
    assert stats.minimum_detectable(values[:2]) is None
    n = stats.seeds_needed(values, 0.08, 30)
    assert stats.minimum_detectable(values, n) <= 0.08 < stats.minimum_detectable(values, n - 1)


def test_the_match_intervals_and_elo_are_the_packages():
    assert stats.wilson_interval is elo.wilson_interval
    assert stats.normal_interval is elo.normal_interval
    assert stats.elo_difference is elo.elo_difference


def test_a_pack_round_trips_with_its_manifest_and_a_refused_one_extracts_nothing(tmp_path):
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "params").write_bytes(b"weights")
    (tmp_path / "run" / "info.json").write_text("{}")
    pack = tmp_path / "out" / "run.tgz"
    entries = [(tmp_path / "run" / "info.json", "info.json"), (tmp_path / "run" / "model", "m")]
    archive.pack(pack, entries, manifest={"preset": "smoke"})
    assert sorted(p.name for p in pack.parent.iterdir()) == ["run.tgz"]  # no temporary left
    seen = []
    names = archive.unpack(pack, tmp_path / "a", lambda n, m: seen.append((n, m)), manifest=True)
    assert seen == [(names, {"preset": "smoke"})] and "pack.json" not in names
    assert (tmp_path / "a" / "m" / "params").read_bytes() == b"weights"
    assert not (tmp_path / "a" / "pack.json").exists()

    def refuse(names, manifest):
        raise ValueError("not this one")

    with pytest.raises(ValueError, match="not this one"):
        archive.unpack(pack, tmp_path / "b", refuse, manifest=True)
    assert not (tmp_path / "b").exists()
    archive.pack(tmp_path / "plain.tgz", entries)  # no manifest: none asked for, none read
    assert "pack.json" not in archive.unpack(tmp_path / "plain.tgz", tmp_path / "c", print)
    with pytest.raises(KeyError):
        archive.unpack(tmp_path / "plain.tgz", tmp_path / "d", print, manifest=True)


def test_report_helpers_write_intervals_differences_logs_and_figures(tmp_path, capsys):
    assert report.interval(0.181, 0.032) == "+0.181 [+0.149, +0.213]"
    assert report.interval(0.5, 0.1, ".2f") == "0.50 [0.40, 0.60]"
    assert report.difference_text([]) == "-"
    assert report.difference_text([0.1, 0.2]).endswith("(n=2)")  # no MDE below 3 units
    diffs = [0.1, 0.2, 0.15, 0.05]
    mean, half = stats.t_interval(diffs)
    mde = stats.minimum_detectable(diffs)
    text = report.difference_text(diffs)
    assert text == f"{report.interval(mean, half)} (n=4, MDE {mde:.3f})"
    log = report.Log(tmp_path / "study.log")
    log("one line")
    log.write("a progress line\n")
    assert capsys.readouterr().out.count(" min] ") == 2
    assert (tmp_path / "study.log").read_text().splitlines()[1].endswith("] a progress line")
    figure = report.figure(2, 1.5)
    figure.add_subplot(1, 1, 1).plot([0, 1], [0, 1])
    figure.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
