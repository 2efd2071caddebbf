"""How long a GUI waits for the model as a UCI engine: `uci`, `isready`, `go nodes`, `go movetime`.

    python experiments/bench/engine_start.py [--model gardner-cpu] [--nodes 200 200]
        [--movetime 500 2000] [--cache DIR]

Starts `python -m mmc_jax.engine --model MODEL` as a child with a fresh, empty compile cache
(`MMC_COMPILE_CACHE`; `--cache DIR` reuses one, for the warm numbers), sends the commands one
at a time as a GUI would, and prints the seconds until each answer (`uciok`, `readyok`,
`bestmove`), the nodes of the last `info` line, and every `info string` that came meanwhile.
The results are in docs/engine.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gardner-cpu")
    parser.add_argument("--nodes", type=int, nargs="*", default=[200, 200])
    parser.add_argument("--movetime", type=int, nargs="*", default=[500, 2000])
    parser.add_argument("--cache", default=None, help="compile cache (default: a fresh one)")
    args = parser.parse_args()
    env = dict(os.environ, MMC_COMPILE_CACHE=args.cache or tempfile.mkdtemp(prefix="engine_"))
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "mmc_jax.engine", "--model", args.model],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )

    def ask(line: str, until: str) -> None:
        sent = time.monotonic()
        child.stdin.write(line + "\n")
        child.stdin.flush()
        notes, nodes = [], "-"
        while True:
            answer = child.stdout.readline()
            if not answer:
                raise SystemExit(f"the engine ended during {line!r}")
            if answer.startswith("info string"):
                notes.append(f"    +{time.monotonic() - sent:7.2f} s  {answer.strip()[:100]}")
            elif answer.startswith("info depth"):
                nodes = answer.split()[answer.split().index("nodes") + 1]
            if answer.startswith(until):
                seconds = time.monotonic() - sent
                print(f"{line:34} {seconds:8.2f} s  nodes {nodes:>5}  {answer.strip()}")
                print("\n".join(notes[:4]), flush=True) if notes else None
                return

    ask("uci", "uciok")
    ask("isready", "readyok")
    for nodes in args.nodes:
        child.stdin.write("position startpos\n")
        ask(f"go nodes {nodes}", "bestmove")
    for millis in args.movetime:
        child.stdin.write("position startpos moves a2a3\n")
        ask(f"go movetime {millis}", "bestmove")
    child.stdin.write("position startpos moves a2a3 e4e3\n")
    ask("go wtime 20000 btime 20000 winc 100 binc 100", "bestmove")
    child.stdin.write("quit\n")
    child.stdin.flush()
    child.wait(60)
    print(f"total {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
