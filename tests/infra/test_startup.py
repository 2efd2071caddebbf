"""`mmc_jax.infra.startup`: the project's XLA flags reach XLA through the commands' start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mmc_jax.infra import startup

YNN = "--xla_cpu_experimental_ynn_fusion_type="
KNOWN = startup.XLA_CPU_FLAGS_JAXLIB[0]


def test_flags_are_appended_to_the_callers_and_never_override_them():
    assert startup.xla_flags_value({}, KNOWN) == YNN
    assert startup.xla_flags_value({"XLA_FLAGS": "--xla_dump_to=/tmp/d"}, KNOWN) == (
        f"--xla_dump_to=/tmp/d {YNN}"
    )
    # The caller's own setting of the same flag, under any value, wins: nothing is added.
    mine = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=individual_dot"}
    assert startup.xla_flags_value(mine, KNOWN) is None
    environ = {"XLA_FLAGS": " --xla_force_host_platform_device_count=2 "}
    assert startup.apply_xla_flags(environ) in (None, environ["XLA_FLAGS"])
    assert startup.apply_xla_flags(environ) is None  # a second call adds nothing


@pytest.mark.parametrize("off", ["off", "0", "false", "no", "OFF"])
def test_mmc_xla_flags_off_adds_nothing(off):
    assert startup.xla_flags_value({startup.XLA_FLAGS_ENV: off}, KNOWN) is None


def test_a_jaxlib_not_known_to_have_the_flags_gets_none():
    # XLA aborts on an unknown flag, so versions outside the list run with their defaults.
    assert startup.xla_flags_value({}, (0, 4)) is None
    assert startup.xla_flags_value({}, (9, 0)) is None
    assert startup.xla_flags_value({}, None) in (None, YNN)


def test_mmc_cpu_devices_adds_the_cpu_device_count():
    flag = startup.CPU_DEVICES_FLAG
    assert startup.xla_flags_value({"MMC_CPU_DEVICES": "2"}, KNOWN) == f"{YNN} {flag}=2"
    # Asked for explicitly, so it stays when the project's flags are off or unknown to jaxlib.
    off = {"MMC_CPU_DEVICES": "3", startup.XLA_FLAGS_ENV: "off"}
    assert startup.xla_flags_value(off, KNOWN) == f"{flag}=3"
    assert startup.xla_flags_value({"MMC_CPU_DEVICES": "3"}, (0, 4)) == f"{flag}=3"
    # The caller's own device count wins.
    mine = {"MMC_CPU_DEVICES": "2", "XLA_FLAGS": f"{flag}=8"}
    assert startup.xla_flags_value(mine, KNOWN) == f"{flag}=8 {YNN}"
    assert startup.cpu_devices({"MMC_CPU_DEVICES": "auto"}) >= 1
    assert startup.cpu_devices({"MMC_CPU_DEVICES": " "}) is None
    assert startup.cpu_devices({}) is None


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_a_bad_mmc_cpu_devices_is_a_one_line_error(bad):
    with pytest.raises(SystemExit, match="MMC_CPU_DEVICES=.*positive integer or 'auto'"):
        startup.cpu_devices({"MMC_CPU_DEVICES": bad})


def test_mmc_cpu_devices_reaches_jax():
    code = (
        "from mmc_jax.infra import startup; startup.start(); import jax; print(jax.device_count())"
    )
    environ = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environ.update(MMC_CPU_DEVICES="3", JAX_PLATFORMS="cpu", MMC_COMPILE_CACHE="off")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True
    )
    assert out.stdout.split()[-1] == "3"


# An absl command's start (`cli.absl_start`, what train/meta/adapt call first), then one
# convolution compiled: does XLA:CPU still put it in a YNNPACK fusion?
_PROBE = """
import jax, jax.numpy as jnp
from absl import app
from mmc_jax.infra import cli

def main(argv):
    cli.absl_start(argv)
    conv = jax.jit(lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
    text = conv.lower(jnp.ones((8, 5, 5, 32)), jnp.ones((3, 3, 32, 32))).compile().as_text()
    print("ynn" if "__ynn_fusion" in text else "eigen")

cli.define_distributed_flags()
app.run(main)
"""


@pytest.mark.skipif(
    startup.jaxlib_version() not in startup.XLA_CPU_FLAGS_JAXLIB,
    reason="this jaxlib gets no project flags",
)
def test_a_command_compiles_its_convolutions_without_ynnpack_and_off_restores_it(tmp_path):
    def probe(**extra):
        env = {
            "PATH": "/usr/bin:/bin",
            "MMC_COMPILE_CACHE": "off",
            "JAX_PLATFORMS": "cpu",
            "HOME": str(tmp_path),
            **extra,
        }
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    assert probe() == "eigen"
    assert probe(**{startup.XLA_FLAGS_ENV: "off"}) == "ynn"
