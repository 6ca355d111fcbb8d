"""The binary on disk: a verified download staged beside it, an atomic swap keeping the previous one, the marker
that lets the unit roll a failing new binary back (README: Updates).

Files beside the binary ``B``: ``B.previous`` (the one before the last swap) and ``B.update``, one line
``<state> <from> <to>``: ``swapped`` (written here), ``started`` (the unit's ExecStopPost, when the old binary
stopped), ``rolled-back`` (ExecStopPost again, when the new one failed before it was confirmed).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from automaton_min.crashpoint import crash_point
from automaton_min.fileio import atomic_write, fsync_dir

if TYPE_CHECKING:
    from automaton_min.update.manifest import Artifact

STATES = ("swapped", "started", "rolled-back")


@dataclass(frozen=True)
class Marker:
    state: str
    old: str
    new: str


def runs_from(path: Path | str) -> bool | None:
    """``path`` still holds the one-file binary this process was started from (None: cannot tell): its head names
    the same archive. A swapped-in binary, or the previous one an owner put back, names another."""
    from automaton_min.update.baked import ONEFILE_ID_ENV, one_file_id

    started = os.environ.get(ONEFILE_ID_ENV)
    if not started:
        return None
    try:
        return one_file_id(path) == started
    except FileNotFoundError:
        return False
    except OSError:
        return None


def previous_of(binary: Path) -> Path:
    return binary.with_name(binary.name + ".previous")


def marker_of(binary: Path) -> Path:
    return binary.with_name(binary.name + ".update")


@contextmanager
def exclusive(binary: Path) -> Iterator[bool]:
    """One update at a time beside ``binary`` (the daemon's task and an owner's ``update``): yields False when
    another holds it."""
    fd = os.open(binary.with_name(f".{binary.name}.update-lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def stage(binary: Path, artifact: "Artifact", fetch: Callable[[Callable[[bytes], None]], int]) -> Path:
    """Download through ``fetch(sink)`` into a hidden file beside ``binary`` (same filesystem: the swap is a rename),
    check its size and sha256, make it executable; ``Refused`` (nothing left behind) when they do not match."""
    import hashlib

    from automaton_min.update.manifest import Refused

    staged = binary.with_name(f".{binary.name}.{os.urandom(6).hex()}.new")
    digest = hashlib.sha256()
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o700)
    try:
        with os.fdopen(fd, "wb") as handle:
            def sink(chunk: bytes) -> None:
                digest.update(chunk)
                handle.write(chunk)

            size = fetch(sink)
            crash_point("update.download")
            handle.flush()
            os.fsync(handle.fileno())
        if size != artifact.size:
            raise Refused(f"the download is {size} bytes, the manifest says {artifact.size} (truncated or replaced)")
        if digest.hexdigest() != artifact.sha256:
            raise Refused("the download's sha256 does not match the signed manifest")
        crash_point("update.verify")
        os.chmod(staged, 0o755)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def swap(binary: Path, staged: Path, marker: Marker) -> None:
    """``staged`` becomes ``binary``; the running one stays as ``binary.previous``. At every instant ``binary`` is a
    whole file: the old one until the last rename, the new one after it. The marker is written before that rename:
    a start that finds it naming a version other than its own knows the swap never happened."""
    previous = previous_of(binary)
    previous.unlink(missing_ok=True)
    os.link(binary, previous)  # the running binary under a second name (a hard link: no copy, no extra space)
    write_marker(binary, marker)
    crash_point("update.swap")
    os.replace(staged, binary)
    fsync_dir(binary.parent)


def write_marker(binary: Path, marker: Marker) -> None:
    atomic_write(marker_of(binary), f"{marker.state} {marker.old} {marker.new}\n".encode(), 0o600)


def read_marker(binary: Path) -> Marker | None:
    try:
        words = marker_of(binary).read_text().split()
    except FileNotFoundError:
        return None
    if len(words) != 3 or words[0] not in STATES:
        return None
    return Marker(*words)


def clear_marker(binary: Path) -> None:
    marker_of(binary).unlink(missing_ok=True)


def put_back(binary: Path) -> None:
    """The previous binary back in place (the failed new one is gone); ``Refused`` when there is none."""
    from automaton_min.update.manifest import Refused

    previous = previous_of(binary)
    if not previous.exists():
        raise Refused(f"there is no previous binary ({previous}) to go back to")
    os.replace(previous, binary)
    fsync_dir(binary.parent)


def remove_stale(binary: Path) -> None:
    """Downloads a killed update left beside ``binary``."""
    for leftover in binary.parent.glob(f".{binary.name}.*.new"):
        leftover.unlink(missing_ok=True)
