"""Run directories on a local disk or in a Google Cloud Storage bucket (`gs://BUCKET/...`).

Every path derived from a workdir goes through `etils.epath`, which reads and writes local paths
with the `os` functions and `gs://` paths through `gcsfs` (or TensorFlow's `tf.io.gfile` when it
is installed). A `gs://` path is never made absolute: `os.path.abspath("gs://b/run")` would give
`<cwd>/gs:/b/run`, a local folder.

A `gs://` workdir needs the `gcs` extra (`pip install 'mmc_jax[gcs]'`): `gcsfs` for epath (the
metrics file, plots, orbax's metadata and step listing) and `google-cloud-storage` for
tensorboardX's event files and orbax's bucket queries; orbax's arrays go through tensorstore,
which talks to GCS by itself.

One writer per workdir: `workdir_lock(workdir)` holds `<workdir>/lock.json` (naming its holder:
host, pid, start time, command) for as long as a run writes there; a second run is refused with
`WorkdirBusy`. On a local disk the lock is an `flock` on that file, which the kernel drops when
its process dies, so a lock left by a killed run is stale by construction and taken over. The
lock file is opened without following links: a `lock.json` that is a symbolic link, a folder,
any other non-regular file or a hard link to another file is refused (`LockFileRefused`), so a
planted link cannot turn a run (often as root) against the file it points to. A
bucket has no locks: there the holder refreshes the object every `LOCK_REFRESH_SECONDS` and a
lock not refreshed for `LOCK_STALE_SECONDS` is stale (best effort: two runs started in the same
instant could both take it).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import os
import shlex
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from etils import epath

GCS_EXTRA = "pip install 'mmc_jax[gcs]'"
# Module -> pip package: what a `gs://` path needs.
GCS_MODULES = {"gcsfs": "gcsfs", "google.cloud.storage": "google-cloud-storage"}


class MissingPackage(ImportError):
    """A `gs://` path given without the packages of the `gcs` extra installed."""


def is_remote(path: str | os.PathLike) -> bool:
    """Whether `path` is a URI such as `gs://bucket/run` rather than a local path."""
    return "://" in os.fspath(path)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package (`google.cloud`)
        return False


def missing_packages(path: str | os.PathLike) -> list[str]:
    """The pip packages that `path` needs and that are not installed ([] for a local path)."""
    if not os.fspath(path).startswith("gs://"):
        return []
    return [package for module, package in GCS_MODULES.items() if not _importable(module)]


def require_packages(path: str | os.PathLike) -> None:
    """Raises `MissingPackage` (one line, naming the extra) when `path` cannot be used here."""
    missing = missing_packages(path)
    if missing:
        raise MissingPackage(f"gs:// paths need {' and '.join(missing)}: {GCS_EXTRA}")


def to_path(path: str | os.PathLike) -> epath.Path:
    """`path` as an `epath.Path` (a relative local path stays relative, a URI stays a URI).

    Raises:
      MissingPackage: a `gs://` path without the `gcs` extra installed.
    """
    require_packages(path)
    return epath.Path(path)


def absolute(path: str | os.PathLike) -> str:
    """The absolute form of a local path; a URI normalised but otherwise unchanged."""
    path = os.fspath(path)
    return os.fspath(epath.Path(path)) if is_remote(path) else os.path.abspath(path)


def join(folder: str | os.PathLike, *names: str) -> str:
    """`folder/name/...` as a string, for a local folder or a URI alike."""
    return os.fspath(epath.Path(folder).joinpath(*names))


def read_text(path: str | os.PathLike) -> str | None:
    """The UTF-8 text of the file `path` (undecodable bytes replaced), or None if it is absent."""
    path = to_path(path)
    if not path.exists():
        return None
    return path.read_bytes().decode("utf-8", errors="replace")


def read_json(path: str | os.PathLike, remedy: str) -> Any | None:
    """The JSON value in the file `path`, or None if it is absent. ValueError, in one line,
    naming the file and `remedy` (the way out), if it cannot be read or parsed."""
    text = None
    try:
        text = read_text(path)
        return None if text is None else json.loads(text)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{os.fspath(path)} is damaged ({error}); {remedy}") from None


def open_manifest(
    path: str | os.PathLike, settings: dict, remedy: str, made: str, elsewhere: str
) -> dict:
    """The shard manifest in the file `path` (`read_json`), or a new one for `settings`
    (`{"settings", "shards": []}`). ValueError, in one line naming the differing settings,
    when its folder holds `made` (e.g. "labels") made with other settings: use `elsewhere`."""
    manifest = read_json(path, remedy) or {"settings": settings, "shards": []}
    if manifest["settings"] != settings:
        differ = sorted(k for k in settings if manifest["settings"].get(k) != settings[k])
        raise ValueError(
            f"{os.path.dirname(os.fspath(path))} holds {made} made with other settings "
            f"({', '.join(differ)}); use {elsewhere}, or the settings it was made with"
        )
    return manifest


def write_json(path: str | os.PathLike, value: Any) -> None:
    """`value` as JSON (indented by 1) in `path`, written atomically (`write_atomically`)."""
    write_atomically(path, json.dumps(value, indent=1))


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Writes `text` to `path` so that a reader never sees half of it.

    A local file is written under a temporary name, synced and renamed over `path`; an object
    in a bucket is replaced by a single upload, which is atomic by itself.
    """
    if is_remote(path):
        to_path(path).write_bytes(text.encode("utf-8"))
        return
    path = os.fspath(path)
    tmp_path = path + ".tmp"
    # Never through a link: a leftover temporary name is removed (a link, not its target),
    # and a link planted in its place after that makes the open fail instead of writing.
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        if not stat.S_ISREG(os.lstat(tmp_path).st_mode):
            os.unlink(tmp_path)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp_path, path)


def unwritable_reason(folder: str | os.PathLike) -> str | None:
    """None when files can be written into the existing `folder`, else why not.

    A bucket folder is probed by writing and deleting a small object, which also checks the
    credentials before any work is done.
    """
    if not is_remote(folder):
        return None if os.access(folder, os.W_OK) else "is not writable"
    probe = to_path(folder) / f".mmc_jax_write_probe_{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except Exception as error:  # gcsfs and google-auth raise many types
        lines = str(error).strip().splitlines()
        return f"is not writable ({type(error).__name__}: {lines[0] if lines else ''})"
    return None


# ---------------------------------------------------------------------------------------------
# One writer per workdir

LOCK_FILE = "lock.json"
LOCK_REFRESH_SECONDS = 60.0  # a bucket lock's heartbeat
LOCK_STALE_SECONDS = 600.0  # a bucket lock not refreshed for this long belongs to a dead run


class WorkdirBusy(OSError):
    """Another run holds the workdir's lock; the message names it."""


class LockFileRefused(WorkdirBusy):
    """The workdir's `lock.json` is not a regular file of its own (a symbolic link, a folder, a
    device, a hard link to another file): no run writes through it; the message says what it is
    and the way out."""


def _refused(workdir, path: str, what: str) -> LockFileRefused:
    return LockFileRefused(
        f"workdir {os.fspath(workdir)}: its lock file {path} is {what}, which a run will not "
        "write through; remove it (no run made it) or pass another --workdir"
    )


def _not_a_lock_file(info: os.stat_result, path: str) -> str | None:
    """What the file of `lstat`/`fstat` result `info` at `path` is when it cannot be a lock
    file, else None."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link to {os.readlink(path)}, not a regular file"
        except OSError:
            return "a symbolic link, not a regular file"
    if stat.S_ISDIR(mode):
        return "a folder, not a regular file"
    if not stat.S_ISREG(mode):
        return "a special file (a pipe, socket or device), not a regular file"
    if info.st_nlink > 1:
        return f"a hard link (one of {info.st_nlink} names of the same file)"
    return None


def describe_holder(record: dict[str, Any] | None) -> str:
    """`pid 123 on host, started 2026-11-26 10:00:00: python -m mmc_jax.train ...`."""
    if not record:
        return "a run that is starting (its lock names no holder yet)"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.get("started", 0)))
    return (
        f"pid {record.get('pid')} on {record.get('host')}, started {started}: "
        f"{record.get('command', '?')}"
    )


def _busy(workdir, record: dict[str, Any] | None, extra: str = "") -> WorkdirBusy:
    return WorkdirBusy(
        f"workdir {os.fspath(workdir)} is in use by another run: {describe_holder(record)}"
        f"{extra}; wait for it to end, or pass another --workdir"
    )


def _holder_record() -> dict[str, Any]:
    now = time.time()
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": now,
        "refreshed": now,
        "command": shlex.join(sys.argv)[:400],
        "token": uuid.uuid4().hex,
    }


def _parse(text: str | None) -> dict[str, Any] | None:
    try:
        record = json.loads(text) if text else None
    except json.JSONDecodeError:  # half written, or not ours
        return None
    return record if isinstance(record, dict) else None


@contextlib.contextmanager
def workdir_lock(
    workdir: str | os.PathLike, *, heartbeat: bool | None = None
) -> Iterator[dict[str, Any] | None]:
    """Holds the workdir's lock (see the module docstring) while the block runs; yields the
    record of a stale holder it took over (a killed run), or None.

    Args:
      workdir: the run directory (created if needed).
      heartbeat: use the refreshed-object lock of buckets (default: for `gs://` workdirs, or a
        local file system without `flock`).

    Raises:
      WorkdirBusy: another live run holds it.
    """
    to_path(workdir).mkdir(parents=True, exist_ok=True)
    path = join(workdir, LOCK_FILE)
    lock = None
    if not (is_remote(workdir) if heartbeat is None else heartbeat):
        lock = _FileLock(path)
        try:
            previous = lock.acquire(workdir)
        except WorkdirBusy:
            raise
        except OSError:  # no flock on this file system: the bucket's way
            lock = None
    if lock is None:
        lock = _HeartbeatLock(path)
        previous = lock.acquire(workdir)
    try:
        yield previous
    finally:
        lock.release()


class _FileLock:
    """`flock` on a local file: released by the kernel when its process dies."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None

    def acquire(self, workdir) -> dict[str, Any] | None:
        import fcntl

        # No link is followed (O_NOFOLLOW), a pipe does not block the open (O_NONBLOCK) and a
        # terminal does not become ours (O_NOCTTY); what opened is checked before any write.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        while True:
            try:
                fd = os.open(self.path, flags, 0o644)
            except OSError as error:
                what = None
                if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
                    with contextlib.suppress(OSError):
                        what = _not_a_lock_file(os.lstat(self.path), self.path)
                if what:
                    raise _refused(workdir, self.path, what) from None
                raise
            what = _not_a_lock_file(os.fstat(fd), self.path)
            if what:
                os.close(fd)
                raise _refused(workdir, self.path, what)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record = _parse(os.read(fd, 1 << 16).decode("utf-8", errors="replace"))
                os.close(fd)
                raise _busy(workdir, record) from None
            except OSError:
                os.close(fd)
                raise
            try:  # the holder before us may have removed the file as it released it
                same = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = _parse(os.read(fd, 1 << 16).decode("utf-8", errors="replace"))
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder_record()).encode("utf-8"))
        os.fsync(fd)
        self.fd = fd
        return previous

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # while still locked: a waiting opener then retries
        os.close(self.fd)
        self.fd = None


class _HeartbeatLock:
    """An object refreshed by its holder (buckets, and file systems without `flock`)."""

    def __init__(self, path: str):
        self.path = path
        self.record = _holder_record()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> dict[str, Any] | None:
        return _parse(read_text(self.path))

    def acquire(self, workdir) -> dict[str, Any] | None:
        if not is_remote(self.path):  # a local folder: the same refusals as `_FileLock`'s
            try:
                what = _not_a_lock_file(os.lstat(self.path), self.path)
            except FileNotFoundError:
                what = None
            if what:
                raise _refused(workdir, self.path, what)
        previous = self._read()
        if previous is not None:
            age = time.time() - float(previous.get("refreshed", 0))
            if age < LOCK_STALE_SECONDS:
                raise _busy(workdir, previous, f" (its lock was refreshed {age:.0f} s ago)")
        write_atomically(self.path, json.dumps(self.record))
        current = self._read()
        if current is None or current.get("token") != self.record["token"]:
            raise _busy(workdir, current)  # another run took it in the same instant
        self._thread = threading.Thread(target=self._refresh, name="mmc_jax lock", daemon=True)
        self._thread.start()
        return previous

    def _refresh(self) -> None:
        while not self._stop.wait(LOCK_REFRESH_SECONDS):
            with contextlib.suppress(Exception):  # a missed refresh only ages the lock
                if (self._read() or {}).get("token") != self.record["token"]:
                    return  # taken over after a long stall: not ours any more
                self.record["refreshed"] = time.time()
                write_atomically(self.path, json.dumps(self.record))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if (self._read() or {}).get("token") == self.record["token"]:
            to_path(self.path).unlink()
