"""trees: removing and measuring untrusted trees, deeper than PATH_MAX, with symlinks, locked modes and races."""

from __future__ import annotations

import errno
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from automaton_min import trees
from automaton_min.trees import largest, remove_tree, tree_size

DEPTH = 1500
LEVEL = "level"  # 6 bytes a level with its slash: 9,000 bytes in all, over PATH_MAX
NOBODY = 65534


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def disk_use(*paths: Path) -> int:
    return sum(os.lstat(path).st_blocks * 512 for path in paths)


def make_chain(top: Path) -> int:
    """``top/level/level/...`` DEPTH levels deep with a 5,000-byte file at the bottom; that file's disk use."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):
            os.mkdir(LEVEL, dir_fd=fd)
            child = os.open(LEVEL, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        try:
            os.write(file_fd, b"x" * 5000)
            return os.fstat(file_fd).st_blocks * 512
        finally:
            os.close(file_fd)
    finally:
        os.close(fd)


@pytest.fixture
def deep_tree(tmp_path: Path):
    top = tmp_path / "deep"
    bottom_use = make_chain(top)
    yield top, bottom_use
    remove_tree(top)  # pytest's own clean-up of old temp dirs would hit the same RecursionError


def make_outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_bytes(b"k" * 100_000)
    return outside


def give_to_nobody(top: Path) -> None:
    for path in [top, *top.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def outcome(action: Callable[[Path], None], base: Path) -> str:
    try:
        action(base)
    except OSError as error:
        return f"{error.errno}|{error.filename}|{error.strerror}"
    return "ok"


def run_unprivileged(work: Path, action: Callable[[Path], None]) -> str:
    """``action(directory)`` on ``work`` as a user that modes bind (root ignores them): "ok" or the OSError."""
    if os.geteuid() != 0:
        return outcome(action, work)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.chdir(work)  # the temp dirs above are root's 0700
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, outcome(action, Path(".")).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        result = pipe.read().decode()
    os.waitpid(pid, 0)
    return result


# --- deeper than PATH_MAX ---------------------------------------------------


def test_the_deep_chain_is_deeper_than_path_max(deep_tree):
    top, _ = deep_tree
    bottom = top.joinpath(*[LEVEL] * DEPTH, "bottom")
    assert len(str(bottom)) > os.pathconf(top, "PC_PATH_MAX")
    with pytest.raises(OSError) as raised:
        os.stat(bottom)
    assert raised.value.errno == errno.ENAMETOOLONG


def test_the_deep_chain_is_measured_and_removed(deep_tree):
    top, bottom_use = deep_tree
    assert bottom_use > 0
    assert tree_size(top) == bottom_use  # directories themselves are not counted
    assert largest(top) == [(LEVEL, bottom_use)]

    remove_tree(top)

    assert not top.exists()


def test_removal_holds_a_few_fds_whatever_the_depth(deep_tree):
    top, _ = deep_tree
    before = open_fds()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 10, hard))  # one fd a level would need 1,500
    try:
        remove_tree(top)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    assert not top.exists()
    assert open_fds() == before




# --- symlinks ---------------------------------------------------------------


def test_symlinks_are_removed_never_followed(tmp_path):
    outside = make_outside(tmp_path)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "to-dir").symlink_to(outside, target_is_directory=True)
    (tree / "sub" / "to-file").symlink_to(outside / "keep.txt")
    (tree / "sub" / "dangling").symlink_to(tmp_path / "nowhere")

    remove_tree(tree)

    assert not tree.exists()
    assert (outside / "keep.txt").read_bytes() == b"k" * 100_000


def test_a_symlink_given_as_the_tree_is_unlinked_alone(tmp_path):
    outside = make_outside(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(outside, target_is_directory=True)

    remove_tree(link)

    assert not link.is_symlink()
    assert (outside / "keep.txt").exists()


def test_what_symlinks_point_to_is_not_counted(tmp_path):
    outside = make_outside(tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "own").write_bytes(b"o")
    (tree / "to-dir").symlink_to(outside, target_is_directory=True)
    (tree / "to-file").symlink_to(outside / "keep.txt")
    link = tmp_path / "link"
    link.symlink_to(outside, target_is_directory=True)

    assert tree_size(tree) == disk_use(tree / "own")
    assert tree_size(link) == 0
    assert [name for name, _ in largest(tree, limit=10)] == ["own"]


# --- modes the command left, failures, races ---------------------------------


def test_directories_left_without_access_are_removed(tmp_path):
    work = tmp_path / "work"
    tree = work / "tree"
    (tree / "locked" / "inner").mkdir(parents=True)
    (tree / "locked" / "file").write_bytes(b"x")
    (tree / "locked" / "inner" / "file").write_bytes(b"x")
    (tree / "read-only").mkdir()
    (tree / "read-only" / "file").write_bytes(b"x")
    give_to_nobody(work)
    os.chmod(tree / "locked" / "inner", 0)
    os.chmod(tree / "locked", 0)
    os.chmod(tree / "read-only", 0o500)

    assert run_unprivileged(work, lambda base: remove_tree(base / "tree")) == "ok"
    assert not tree.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give part of the tree to another user")
def test_a_failure_is_raised_after_everything_else_is_removed(tmp_path):
    work = tmp_path / "work"
    tree = work / "tree"
    for name in ("a", "theirs", "z"):
        (tree / name).mkdir(parents=True)
        (tree / name / "file").write_bytes(b"x")
    give_to_nobody(work)
    os.chown(tree / "theirs", 0, 0)  # mode 0755, root's: nobody can neither empty it nor chmod it

    result = run_unprivileged(work, lambda base: remove_tree(base / "tree"))

    code, filename, message = result.split("|")
    assert int(code) == errno.EACCES
    assert filename == "tree/theirs/file"
    assert "3 entries could not be removed" in message  # the file, then theirs and tree left non-empty
    assert sorted(path.relative_to(work) for path in work.rglob("*")) == [
        Path("tree"),
        Path("tree/theirs"),
        Path("tree/theirs/file"),
    ]


def test_a_missing_path_is_fine(tmp_path):
    remove_tree(tmp_path / "gone")
    remove_tree(tmp_path / "no-parent" / "gone")
    assert tree_size(tmp_path / "gone") == 0
    assert largest(tmp_path / "gone") == []


def test_entries_vanishing_meanwhile_are_fine(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "file").write_bytes(b"x")
    (tree / "a" / "b" / "file").write_bytes(b"x")
    real_unlink, real_rmdir = os.unlink, os.rmdir

    def unlink_after_someone_else(name, *, dir_fd=None):
        real_unlink(name, dir_fd=dir_fd)
        real_unlink(name, dir_fd=dir_fd)

    def rmdir_after_someone_else(name, *, dir_fd=None):
        real_rmdir(name, dir_fd=dir_fd)
        real_rmdir(name, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", unlink_after_someone_else)
    monkeypatch.setattr(os, "rmdir", rmdir_after_someone_else)
    remove_tree(tree)
    monkeypatch.undo()

    assert not tree.exists()


def test_a_directory_moved_away_meanwhile_does_not_lead_the_walk_out(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "a" / "b" / "c").mkdir(parents=True)
    (tree / "a" / "b" / "c" / "file").write_bytes(b"x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_bytes(b"keep")
    real_scan = trees._Remover.scan

    def scan_while_the_command_moves_b(self, fd):
        # white box: once the walk is inside a/b/c, b leaves the tree, so ".." of b is elsewhere
        if [level.name for level in self.levels] == ["", "a", "b", "c"] and (tree / "a" / "b").exists():
            os.rename(tree / "a" / "b", elsewhere / "b")
        return real_scan(self, fd)

    monkeypatch.setattr(trees._Remover, "scan", scan_while_the_command_moves_b)
    remove_tree(tree)

    assert not tree.exists()
    assert (elsewhere / "keep.txt").read_bytes() == b"keep"
    assert (elsewhere / "b").is_dir()  # out of the tree now: left where the command put it


# --- sizes --------------------------------------------------------------------


def test_sizes_are_the_disk_use_of_regular_files(tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    contents = {"empty": b"", "one": b"1", "sub/page": b"p" * 5000, "sub/mib": b"m" * (1 << 20)}
    for name, data in contents.items():
        (tree / name).write_bytes(data)
    sparse = tree / "sparse"
    with open(sparse, "wb") as handle:
        handle.truncate(64 << 20)
    files = [tree / name for name in contents] + [sparse]

    assert tree_size(tree) == disk_use(*files)
    assert tree_size(tree / "sub" / "mib") == disk_use(tree / "sub" / "mib") >= 1 << 20
    assert tree_size(tree / "empty") == 0
    assert tree_size(sparse) < 1 << 20  # 64 MiB long, next to nothing on disk


def test_a_hard_linked_file_counts_once(tmp_path):
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    data = tree / "a" / "data"
    data.write_bytes(b"d" * 256_000)
    os.link(data, tree / "b" / "again")
    os.link(data, tree / "a" / "third")

    assert tree_size(tree) == disk_use(data)


def test_largest_names_what_filled_the_disk_biggest_first(tmp_path):
    tree = tmp_path / "tree"
    (tree / "big" / "nested").mkdir(parents=True)
    for index in range(3):
        (tree / "big" / "nested" / f"part{index}").write_bytes(b"b" * 256_000)
    (tree / "medium.bin").write_bytes(b"m" * 512_000)
    (tree / "small").mkdir()
    (tree / "small" / "file").write_bytes(b"s")
    (tree / "tiny").write_bytes(b"t")
    (tree / "link").symlink_to(tree / "big", target_is_directory=True)

    everything = largest(tree, limit=10)

    assert [name for name, _ in everything] == ["big", "medium.bin", "small", "tiny"]  # ties by name
    assert everything == [(name, tree_size(tree / name)) for name, _ in everything]
    assert largest(tree, limit=1) == everything[:1]
    assert largest(tree) == everything[:3]
