"""atomic_write: mode before content, atomic replacement, no-clobber, and real crashes between write and rename."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from automaton_min import fileio
from automaton_min.chain.wallet import ensure_wallet, load_wallet
from automaton_min.config import load_config
from automaton_min.fileio import atomic_write, file_mode, open_to_others
from automaton_min.home import Home

CRASH = 137


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def temp_files(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


@pytest.fixture
def spy_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record (mode, size) of the temp file at the moment each write to it starts."""
    seen: list[tuple[int, int]] = []
    real_fdopen = os.fdopen

    class Spy:
        def __init__(self, handle) -> None:
            self._handle = handle

        def write(self, data: bytes) -> int:
            st = os.fstat(self._handle.fileno())
            seen.append((stat.S_IMODE(st.st_mode), st.st_size))
            return self._handle.write(data)

        def __getattr__(self, name: str):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self._handle.__exit__(*exc)

    monkeypatch.setattr(fileio.os, "fdopen", lambda *a, **k: Spy(real_fdopen(*a, **k)))
    return seen


# ---------------------------------------------------------------- mode before content


@pytest.mark.parametrize("mode", [0o600, 0o444, 0o640, 0o400])
def test_mode_is_set_before_any_content(tmp_path: Path, spy_writes, mode: int) -> None:
    target = tmp_path / "secret.json"
    atomic_write(target, b'{"k":"v"}', mode)
    assert spy_writes == [(mode, 0)]  # the temp file had its final mode while still empty
    assert mode_of(target) == mode
    assert target.read_bytes() == b'{"k":"v"}'
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("mode", [0o600, 0o444, 0o644])
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_final_mode_is_exact_whatever_the_umask(tmp_path: Path, mode: int, umask: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "f", b"x", mode)
        atomic_write(tmp_path / "g", b"x", mode, replace=False)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "f") == mode
    assert mode_of(tmp_path / "g") == mode


def test_replacing_a_file_takes_the_new_mode(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    os.chmod(target, 0o666)
    atomic_write(target, b"new", 0o600)
    assert mode_of(target) == 0o600
    assert target.read_bytes() == b"new"


def test_default_mode_is_owner_only(tmp_path: Path) -> None:
    atomic_write(tmp_path / "f", b"x")
    assert mode_of(tmp_path / "f") == 0o600
    assert not open_to_others(tmp_path / "f")


# ---------------------------------------------------------------- atomic replacement


def test_replace_swaps_in_a_new_inode(tmp_path: Path) -> None:
    """A reader holding the old file sees the old bytes in full; a new open sees the new bytes in full."""
    target = tmp_path / "automaton.json"
    target.write_bytes(b"old contents")
    with open(target, "rb") as reader:
        old_inode = os.fstat(reader.fileno()).st_ino
        atomic_write(target, b"new contents, longer than before", 0o600)
        assert reader.read() == b"old contents"
    assert os.stat(target).st_ino != old_inode
    assert target.read_bytes() == b"new contents, longer than before"
    assert temp_files(tmp_path) == []


def test_replace_creates_a_missing_file(tmp_path: Path) -> None:
    atomic_write(tmp_path / "new", b"data", 0o600)
    assert (tmp_path / "new").read_bytes() == b"data"
    assert os.listdir(tmp_path) == ["new"]


def test_temp_file_lives_next_to_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same directory, so the rename never crosses a filesystem; hidden, so nothing mistakes it for the real file."""
    renames: list[tuple[str, str]] = []
    real_replace = os.replace
    monkeypatch.setattr(fileio.os, "replace", lambda a, b: (renames.append((str(a), str(b))), real_replace(a, b))[1])
    atomic_write(tmp_path / "automaton.json", b"x")
    [(source, dest)] = renames
    assert Path(source).parent == tmp_path
    assert Path(source).name.startswith(".automaton.json.") and source.endswith(".tmp")
    assert dest == str(tmp_path / "automaton.json")


def test_fsyncs_file_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(stat.S_IFMT(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", spy)
    atomic_write(tmp_path / "f", b"x")
    assert synced == [stat.S_IFREG, stat.S_IFDIR]


def test_a_failed_write_leaves_the_target_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"keep me")

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(fileio.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        atomic_write(target, b"replacement", 0o600)
    assert target.read_bytes() == b"keep me"
    assert temp_files(tmp_path) == []


def test_bad_data_leaves_no_temp(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic_write(tmp_path / "f", "text, not bytes", 0o600)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- replace=False


def test_no_clobber_creates_when_absent(tmp_path: Path) -> None:
    atomic_write(tmp_path / "wallet.json", b"first", 0o600, replace=False)
    assert (tmp_path / "wallet.json").read_bytes() == b"first"
    assert os.listdir(tmp_path) == ["wallet.json"]
    assert os.stat(tmp_path / "wallet.json").st_nlink == 1  # the temp link is gone


def test_no_clobber_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "wallet.json"
    target.write_bytes(b"original")
    os.chmod(target, 0o600)
    before = os.stat(target)
    with pytest.raises(FileExistsError):
        atomic_write(target, b"intruder", 0o600, replace=False)
    assert target.read_bytes() == b"original"
    assert os.stat(target).st_ino == before.st_ino
    assert os.listdir(tmp_path) == ["wallet.json"]  # no temp file left behind


def test_no_clobber_refuses_an_empty_file_and_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    for name in ("empty", "link"):
        with pytest.raises(FileExistsError):
            atomic_write(tmp_path / name, b"x", 0o600, replace=False)
    assert not (tmp_path / "nowhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["empty", "link"]


def test_file_mode_and_open_to_others(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    for mode, open_ in [(0o600, False), (0o400, False), (0o700, False), (0o640, True), (0o604, True), (0o601, True)]:
        os.chmod(path, mode)
        assert file_mode(path) == mode
        assert open_to_others(path) is open_


# ---------------------------------------------------------------- a real crash between write and rename


def _run_crashing(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )


CONFIG_CRASH = """
    import os, sys
    from pathlib import Path
    from automaton_min.config import load_config, save_config
    from automaton_min.home import Home

    home = Home(Path(sys.argv[1]))
    config = load_config(home)
    config.stored["name"] = "renamed-before-the-crash"

    def crash(src, dst):
        sys.stdout.write(src + "\\n")
        sys.stdout.flush()
        os._exit(137)  # the power goes out: no cleanup, no finally, no atexit

    os.replace = crash
    save_config(home, config)
    sys.exit(0)  # not reached
"""


def test_crash_before_rename_keeps_the_old_config(set_up: Home) -> None:
    path = set_up.config_path
    before = path.read_bytes()
    result = _run_crashing(CONFIG_CRASH, str(set_up.root))
    assert result.returncode == CRASH, result.stderr
    # The crash really came after the write: the temp file holds the new, complete document.
    temp = Path(result.stdout.strip())
    assert temp.parent == set_up.root and temp.exists()
    assert orjson.loads(temp.read_bytes())["name"] == "renamed-before-the-crash"
    assert mode_of(temp) == 0o600
    # ... and the real file is untouched and still loads.
    assert path.read_bytes() == before
    assert load_config(set_up)["name"] == "ada"
    assert mode_of(path) == 0o600


WALLET_CRASH = """
    import os, sys
    from pathlib import Path
    from automaton_min.chain.wallet import ensure_wallet

    def crash(src, dst):
        sys.stdout.write(src + "\\n")
        sys.stdout.flush()
        os._exit(137)

    os.link = crash
    ensure_wallet(Path(sys.argv[1]))
    sys.exit(0)  # not reached
"""


def test_crash_before_link_leaves_no_wallet(home: Home) -> None:
    home.ensure()
    result = _run_crashing(WALLET_CRASH, str(home.wallet_path))
    assert result.returncode == CRASH, result.stderr
    assert not home.wallet_path.exists()
    temp = Path(result.stdout.strip())
    # The orphaned temp file holds a key nobody uses; it must still be private to the owner.
    assert temp.parent == home.root and temp.exists()
    assert mode_of(temp) == 0o600
    assert set(orjson.loads(temp.read_bytes())) == {"chainType", "privateKey", "createdAt"}

    wallet, created = ensure_wallet(home.wallet_path)
    assert created is True
    assert load_wallet(home.wallet_path).address == wallet.address
    assert mode_of(home.wallet_path) == 0o600
    stray_key = orjson.loads(temp.read_bytes())["privateKey"]
    assert orjson.loads(home.wallet_path.read_bytes())["privateKey"] != stray_key
    again, created = ensure_wallet(home.wallet_path)
    assert (again.address, created) == (wallet.address, False)
