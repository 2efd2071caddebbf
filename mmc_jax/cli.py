"""Shared pieces of the command-line tools: argparse types and model loading with one-line
errors (argparse prints `usage` and the error, and exits 2)."""

from __future__ import annotations

import argparse

from mmc_jax import checkpoint
from mmc_jax import rules as R


def variant_arg(name: str) -> str:
    try:
        return R.check_variant(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def games_arg(text: str) -> int:
    try:
        games = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--games must be an integer, got {text!r}") from None
    if games <= 0:
        raise argparse.ArgumentTypeError(f"--games must be positive, got {games}")
    if games % 2:
        raise argparse.ArgumentTypeError(
            f"--games must be even (the model plays half the games as White), got {games}"
        )
    return games


def integer_arg(flag: str, minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < minimum:
            kind = "positive" if minimum == 1 else "non-negative"
            raise argparse.ArgumentTypeError(f"{flag} must be {kind}, got {value}")
        return value

    return parse


def load_or_fail(parser, path: str, step: int | None, flag: str):
    try:
        return checkpoint.load_model(path, step)
    except (FileNotFoundError, ValueError) as error:
        parser.error(f"{flag} {path}: {error}")
