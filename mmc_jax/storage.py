"""Run directories on a local disk or in a Google Cloud Storage bucket (`gs://BUCKET/...`).

Every path derived from a workdir goes through `etils.epath`, which reads and writes local paths
with the `os` functions and `gs://` paths through `gcsfs` (or TensorFlow's `tf.io.gfile` when it
is installed). A `gs://` path is never made absolute: `os.path.abspath("gs://b/run")` would give
`<cwd>/gs:/b/run`, a local folder.

A `gs://` workdir needs the `gcs` extra (`pip install 'mmc_jax[gcs]'`): `gcsfs` for epath (the
metrics file, plots, orbax's metadata and step listing) and `google-cloud-storage` for
tensorboardX's event files and orbax's bucket queries; orbax's arrays go through tensorstore,
which talks to GCS by itself.
"""

from __future__ import annotations

import importlib.util
import os

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
    with open(tmp_path, "w", encoding="utf-8") as f:
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
