"""Worker processes that never outlive their parent, and a SIGTERM that stops like Ctrl-C.

The engine-game pools (`algorithms/supervised.py`'s dataset, `mmc_jax.labels`) start worker
processes, and each worker starts a Fairy-Stockfish process. Killed with `kill -9`, a parent
cannot clean up, so the workers and engines must notice by themselves:

- `worker_init` (a pool's `initializer`): the worker asks Linux to send it SIGTERM when its
  parent dies (`prctl(PR_SET_PDEATHSIG)`), and answers SIGTERM by killing the engines it
  started (`uci.kill_all`) and exiting at once. `Pool.terminate()` sends the same SIGTERM.
- `sigterm_as_interrupt()`: around work in the main thread that has no iteration to finish (a
  dataset being made), SIGTERM raises `Terminated` (a `KeyboardInterrupt`), so the `with` of a
  pool terminates its workers and the command says what it kept, as it does for Ctrl-C.
- `worker_pool(processes)`: the pool, whose end never hangs. A worker's SIGTERM handler is
  Python code, run by its main thread; a signal the kernel hands to another of its threads (an
  engine's reader, JAX's) waits until the main thread runs bytecode again, and `Pool.terminate`
  joined such a worker forever (seen once at the end of `bench memory` with 2 label
  processes). A worker still alive `grace` seconds after the pool's terminate began is killed
  (SIGKILL); its engines read the end of their input and quit.

Elsewhere than Linux the parent-death signal is not available: `worker_init` then only installs
the SIGTERM handler.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by `sigterm_as_interrupt`."""


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `signum` to this process when its parent exits; True if it
    could (Linux). A parent that already exited (re-parented to init) is answered at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # the parent died before the request: nobody would send it
        os.kill(os.getpid(), signum)
    return True


def _terminate_worker(signum, frame) -> None:
    del frame
    from mmc_jax import uci

    uci.kill_all()
    os._exit(128 + signum)


def worker_init() -> None:
    """A pool worker's initializer (module doc): it dies with its parent, and its engines
    with it."""
    signal.signal(signal.SIGTERM, _terminate_worker)
    die_with_parent(signal.SIGTERM)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block (main thread only; elsewhere nothing changes), SIGTERM raises
    `Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        del signum, frame
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def worker_pool(
    processes: int, initializer: Callable[[], None] = worker_init, grace: float = 10.0
) -> Iterator:
    """A spawn-context pool of `processes` workers started with `initializer` (default
    `worker_init`), terminated on leaving the block like `multiprocessing.Pool`'s own `with`,
    except that a worker still alive `grace` seconds after the terminate began is killed
    (module doc)."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that runs JAX
    before = set(multiprocessing.active_children())
    pool = context.Pool(processes, initializer=initializer)
    try:
        yield pool
    finally:
        ending = threading.Thread(target=pool.terminate, daemon=True)
        ending.start()  # marks the pool as ending (no replacement workers), SIGTERMs, joins
        ending.join(grace)
        if ending.is_alive():
            for worker in set(multiprocessing.active_children()) - before:
                if worker.is_alive():
                    worker.kill()
            ending.join()
