"""Runs as tar.gz archives, the one format of the studies for a run that travels: a stopped
budgeted run parked in git (`runner.park`), an accelerator's pretraining brought back to the
CPU (the adaptation study's `--pack`).

`pack` writes the archive whole and replaces it atomically (a time limit or a crash leaves the
last complete one); `unpack` extracts with tarfile's "data" filter (no absolute paths, no
links out of the destination, no devices) after the caller's check of the names and of the
manifest.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

MANIFEST = "pack.json"


def pack(archive: Path, entries: Iterable[tuple[Path, str]], manifest: dict | None = None) -> None:
    """Writes `entries` ((path, name in the archive): a file, or a folder with everything in
    it) into the tar.gz `archive`, and `manifest` as `pack.json` when given; the archive is
    replaced only once complete."""
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    temporary = archive.with_name(archive.name + ".tmp")
    with tarfile.open(temporary, "w:gz") as tar:
        for path, name in entries:
            tar.add(path, arcname=name)
        if manifest is not None:
            data = json.dumps(manifest).encode()
            entry = tarfile.TarInfo(MANIFEST)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
    os.replace(temporary, archive)


def unpack(
    archive: Path,
    destination: Path,
    check: Callable[[list[str], dict | None], None],
    manifest: bool = False,
) -> list[str]:
    """Extracts the tar.gz `archive` into `destination` and returns the names of its members.
    `check(names, manifest)` sees them first and raises to refuse the archive; with `manifest`,
    the archive's `pack.json` is read (KeyError when it has none), passed to `check` and not
    extracted."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        info = None
        if manifest:
            info = json.loads(tar.extractfile(MANIFEST).read())
            members = [m for m in members if m.name != MANIFEST]
        names = [m.name for m in members]
        check(names, info)
        tar.extractall(destination, members=members, filter="data")
    return names
