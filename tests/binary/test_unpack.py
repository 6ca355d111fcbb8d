"""The one-file binary unpacks itself once per version into a cache on disk, checks that copy at every start, and
runs nothing it did not unpack itself (build/launcher.sh; README: The binary).

Skipped unless ``AUTOMATON_BINARY`` names the binary. Each test gives the binary a bare environment with its own
``HOME`` and ``XDG_CACHE_HOME``, so it starts with nothing unpacked.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import resource
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

BINARY = os.environ.get("AUTOMATON_BINARY", "")
pytestmark = pytest.mark.skipif(not BINARY, reason="set AUTOMATON_BINARY to the built binary (build/build.sh makes dist/automaton-min)")
MB = 1 << 20


def archive_id(binary: Path) -> str:
    head = binary.read_bytes()[:4096].decode("ascii", "replace")
    return next(line[3:] for line in head.splitlines() if line.startswith("ID="))


class User:
    """The binary run by a user with a fresh home; ``cache`` is where it should unpack."""

    def __init__(self, tmp: Path, binary: Path | None = None) -> None:
        self.binary = binary or Path(BINARY).absolute()
        self.home = tmp / "user"
        self.home.mkdir(mode=0o700, exist_ok=True)
        self.cache = tmp / "cache"
        self.env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "XDG_CACHE_HOME": str(self.cache),
                    "TMPDIR": str(tmp / "tmp")}
        (tmp / "tmp").mkdir(exist_ok=True)

    @property
    def unpacked(self) -> Path:
        return self.cache / "automaton-min" / archive_id(self.binary)[:16]

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.binary), *args], env={**self.env, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120, cwd=self.home)

    def setup(self) -> None:
        result = self("setup", "--name", "ada", "--genesis-prompt", "Notes.", "--creator-address",
                      "0x1234567890AbcdEF1234567890aBcdef12345678", "--openai-base-url", "http://127.0.0.1:9",
                      "--inference-model", "m", "--yes")
        assert result.returncode == 0, result.stderr

    def written(self, *args: str) -> int:
        """Bytes the run wrote toward block storage (the kernel's count; tmpfs writes are not in it)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
        assert self(*args).returncode == 0
        return (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512


def on_tmpfs(path: Path) -> bool:
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    return max((m for m in mounts if str(path).startswith(m[1].rstrip("/") + "/")), key=lambda m: len(m[1]))[2] == "tmpfs"


def test_the_first_start_unpacks_and_later_starts_write_nothing(tmp_path: Path) -> None:
    user = User(tmp_path)
    first = user.written("--version")
    assert (user.unpacked / "bundle" / "automaton-min").is_file()
    user.setup()
    later = [user.written("status") for _ in range(3)]
    assert max(later) < 1 * MB, later
    if not on_tmpfs(tmp_path):  # the kernel counts only what goes to block storage
        assert first > 5 * MB, f"the first start wrote {first} bytes: did it unpack at all?"
    assert not any((tmp_path / "tmp").iterdir()), "nothing is left in TMPDIR"


def test_an_unpacked_file_changed_afterwards_is_never_run(tmp_path: Path) -> None:
    """A file of the unpacked copy rewritten in place, even with its size and modification time kept, is noticed
    at the next start: the copy is unpacked again and the planted code never runs."""
    user = User(tmp_path)
    assert user("--version").returncode == 0
    entry = next(p for p in (user.unpacked / "bundle").rglob("*") if p.name == "base_library.zip")
    stat = entry.stat()
    planted = tmp_path / "planted"
    with open(entry, "r+b") as handle:  # same size, same mtime: only its ctime tells
        handle.write(b"\0" * 64)
    os.utime(entry, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    sneaky = user.unpacked / "bundle" / "extra.sh"
    sneaky.write_text(f"touch {planted}\n")
    result = user("--version")
    assert result.returncode == 0, result.stderr
    assert not sneaky.exists() and not planted.exists()
    assert hashlib.sha256(entry.read_bytes()).digest() != hashlib.sha256(b"\0" * 64).digest()
    assert entry.read_bytes()[:64] != b"\0" * 64


def test_a_cache_someone_else_owns_is_not_used(tmp_path: Path) -> None:
    """Another user who made the cache folder first (with a program of theirs in it) gets nothing run: the binary
    unpacks where only its own user can write instead."""
    if os.geteuid() != 0:
        pytest.skip("making a folder another user owns needs root")
    user = User(tmp_path)
    planted = tmp_path / "planted"
    theirs = user.unpacked / "bundle"
    theirs.mkdir(parents=True)
    (theirs / "automaton-min").write_text(f"#!/bin/sh\ntouch {planted}\n")
    (theirs / "automaton-min").chmod(0o755)
    for path in (user.cache / "automaton-min", user.unpacked, theirs, theirs / "automaton-min"):
        os.chown(path, 4242, 4242)
    (user.cache / "automaton-min").chmod(0o777)
    result = user("--version", XDG_RUNTIME_DIR=str(tmp_path / "run"))
    assert result.returncode == 0 and result.stdout.startswith("automaton-min "), result.stderr
    assert not planted.exists()
    assert (tmp_path / "run" / "automaton-min" / user.unpacked.name / "bundle" / "automaton-min").is_file()


def test_a_cache_inside_a_folder_others_may_write_is_not_used(tmp_path: Path) -> None:
    """Whoever may write a folder above the cache could swap the whole cache folder for theirs between the check and
    the start: such a place is passed over for one only this user and root can change."""
    user = User(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what is in it (not sticky)
    result = user("--version", XDG_CACHE_HOME=str(shared / "cache"), XDG_RUNTIME_DIR=str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert not (shared / "cache" / "automaton-min" / user.unpacked.name).exists()
    assert (tmp_path / "run" / "automaton-min" / user.unpacked.name / "seal").is_file()
    # the same under a sticky folder (as /tmp is): others cannot rename this user's entries there
    shared.chmod(0o1777)
    assert user("--version", XDG_CACHE_HOME=str(shared / "cache")).returncode == 0
    assert (shared / "cache" / "automaton-min" / user.unpacked.name / "seal").is_file()


def test_without_home_it_unpacks_in_the_temp_folder_not_a_made_up_home(tmp_path: Path) -> None:
    user = User(tmp_path)
    env = {k: v for k, v in user.env.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    result = subprocess.run([str(user.binary), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tmp" / f"automaton-min-{os.geteuid()}" / user.unpacked.name / "seal").is_file()


def test_a_running_program_holds_its_copy(tmp_path: Path) -> None:
    """While the program runs, its copy's seal is locked (shared), which is what keeps a prune away from it."""
    user = User(tmp_path)
    user.setup()
    seal = user.unpacked / "seal"
    run = subprocess.Popen([str(user.binary), "run"], env=user.env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert any("automaton-min started" in line for line in run.stdout), "the run never started"
    finally:
        held = subprocess.run(["flock", "-n", "-x", str(seal), "true"]).returncode != 0
        run.terminate()
        run.wait(timeout=60)
    assert held, "the running program did not hold its copy"
    assert subprocess.run(["flock", "-n", "-x", str(seal), "true"]).returncode == 0  # let go at its exit


def test_a_held_copy_is_never_pruned(tmp_path: Path) -> None:
    """Unpacking a version keeps only itself and the newest other copy, but never one a running program holds."""
    user = User(tmp_path)
    versions = user.cache / "automaton-min"
    copies = {name: versions / name for name in ("00000000000000aa", "00000000000000bb")}
    for when, copy in enumerate(copies.values(), start=1):
        (copy / "bundle").mkdir(parents=True)
        (copy / "seal").write_text("")
        os.utime(copy, (1_000_000 * when, 1_000_000 * when))  # aa the oldest: the one a prune takes
    held = os.open(copies["00000000000000aa"] / "seal", os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_SH)  # as a running program of that version holds it
        assert user("--version").returncode == 0
        assert copies["00000000000000aa"].exists() and copies["00000000000000bb"].exists()
    finally:
        os.close(held)
    shutil.rmtree(user.unpacked)
    assert user("--version").returncode == 0  # nothing holds it now
    assert not copies["00000000000000aa"].exists() and copies["00000000000000bb"].exists()


def test_a_damaged_binary_says_so_in_one_line(tmp_path: Path) -> None:
    damaged = tmp_path / "automaton-min"
    data = bytearray(Path(BINARY).read_bytes())
    data[-100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    damaged.chmod(0o755)
    result = User(tmp_path, damaged)("--version")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"automaton-min: {damaged} is damaged (its archive does not match its sha256); download it again"]


def test_an_unpack_folder_that_cannot_be_used_is_named_with_the_fix(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    result = User(tmp_path)("--version", AUTOMATON_UNPACK_DIR=str(blocked))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"automaton-min: cannot unpack into AUTOMATON_UNPACK_DIR={blocked}: it must be a folder this user owns, "
        "can write, and may run programs from, in folders only it and root can change"]


def test_an_unpack_folder_in_the_workspace_is_refused(tmp_path: Path) -> None:
    """Commands write the workspace: a binary unpacked there could be changed by them before its next start."""
    user = User(tmp_path)
    workspace = user.home / ".automaton" / "workspace"
    user.setup()
    result = user("run", AUTOMATON_UNPACK_DIR=str(workspace / "unpacked"))
    assert result.returncode != 0
    assert "this program runs from" in result.stderr and "AUTOMATON_UNPACK_DIR" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_starts_racing_to_unpack_all_run(tmp_path: Path) -> None:
    user = User(tmp_path)
    results: list[subprocess.CompletedProcess] = []
    threads = [threading.Thread(target=lambda: results.append(user("--version"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.returncode for r in results] == [0] * 4, [r.stderr for r in results]
    assert sorted(p.name for p in (user.cache / "automaton-min").iterdir()) == [user.unpacked.name]


def test_only_this_version_and_the_one_before_are_kept(tmp_path: Path) -> None:
    user = User(tmp_path)
    versions = user.cache / "automaton-min"
    for old in ("0000000000000001", "0000000000000002"):
        (versions / old / "bundle").mkdir(parents=True)
        os.utime(versions / old, (1_000_000 + int(old), 1_000_000 + int(old)))
    assert user("--version").returncode == 0
    assert sorted(p.name for p in versions.iterdir()) == sorted(["0000000000000002", user.unpacked.name])
    shutil.rmtree(versions)
