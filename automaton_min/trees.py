"""Removing and measuring directory trees that an untrusted command made.

Both walks are iterative and hold at most five fds whatever the depth (one per level would hit ``RLIMIT_NOFILE`` at a
depth the command picks). A child is opened by name from its parent's fd with ``O_NOFOLLOW``; going up opens ``..``
and checks it is the directory the walk came from (as fts(3) does), else goes down again from the root by the recorded
names. Memory grows with the depth, never the tree. Neither walk enters another filesystem (``remove_tree`` does not
empty a mount point; a same-filesystem bind mount is not seen). From ``path``'s own name down nothing is followed.
"""

from __future__ import annotations

import errno
import heapq
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_OWNER_ALL = 0o700
_BLOCK = 512  # st_blocks unit on Linux, whatever the filesystem's block size
# Subdirectory names remembered per scan when removing; the rest wait for the rescan.
_PENDING_MAX = 10_000


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it (a symlink or file: just it; missing: fine); links never followed.

    Directories without access get mode 0700 first; entries vanishing meanwhile are fine. Any other failure does
    not stop it: what can go, goes, then one ``OSError`` names the first failure's errno and path and the count.
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise ValueError(f"not a directory entry that can be removed: {path}")
    try:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return
    try:
        _remove_entry(path, parent_fd)
    finally:
        os.close(parent_fd)


def tree_size(path: Path) -> int:
    """Disk use in bytes (``st_blocks * 512``) of the regular files under ``path`` (or of ``path``, a file).

    Hard links count once; links, other filesystems and unreadable directories are left out; missing measures 0."""
    path = Path(path)
    try:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return 0
    try:
        return _measure(path.name or ".", parent_fd)
    finally:
        os.close(parent_fd)


def largest(path: Path, limit: int = 3) -> list[tuple[str, int]]:
    """The ``limit`` biggest entries directly under ``path`` as ``(name, bytes)`` by ``tree_size``, biggest first.

    Ties go by name; a file hard-linked from two entries counts in both; links and other filesystems are left out."""
    path = Path(path)
    try:
        root_fd = os.open(path, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        sizes = _entry_sizes(root_fd)
        return heapq.nsmallest(limit, sizes, key=lambda item: (-item[1], item[0]))
    finally:
        os.close(root_fd)


class _Level:
    """One directory on the walk's current path: its name in its parent, (st_dev, st_ino), the subdirectories still
    to visit, the entries that failed (never retried), and whether it is yet to be scanned."""

    __slots__ = ("name", "identity", "pending", "skipped", "unscanned")

    def __init__(self, name: str, identity: tuple[int, int]) -> None:
        self.name, self.identity, self.pending, self.skipped, self.unscanned = name, identity, [], set(), True


class _Walk:
    """Depth-first walk of ``root_fd``; subclasses say what happens in each directory, ``levels[-1]``."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        root = os.fstat(root_fd)
        self.device = root.st_dev
        self.levels = [_Level("", (root.st_dev, root.st_ino))]

    def scan(self, fd: int) -> bool:
        """Handle the current directory's entries; True to be called again after its subdirectories."""
        raise NotImplementedError

    def open_child(self, fd: int, name: str) -> int | None:
        """An fd on the subdirectory ``name``, or None to pass it by."""
        raise NotImplementedError

    def left(self, fd: int, name: str) -> None:
        """The walk is back from the subdirectory ``name``."""

    def fail(self, name: str, error: OSError) -> None:
        """``name`` in the current directory could not be handled."""

    def run(self) -> None:
        fd = os.dup(self.root_fd)
        try:
            while True:
                level = self.levels[-1]
                if level.pending:
                    fd = self._descend(fd, level.pending.pop())
                elif level.unscanned:
                    level.unscanned = self.scan(fd)
                elif len(self.levels) > 1:
                    child = self.levels.pop()
                    depth = len(self.levels)
                    fd = self._climb(fd)
                    if len(self.levels) == depth:
                        self.left(fd, child.name)
                else:
                    return
        finally:
            os.close(fd)

    def _descend(self, fd: int, name: str) -> int:
        child_fd = self.open_child(fd, name)
        if child_fd is None:
            return fd
        child = os.fstat(child_fd)
        if child.st_dev != self.device:
            os.close(child_fd)
            self.fail(name, OSError(errno.EXDEV, "a mount point: not entered"))
            return fd
        os.close(fd)
        self.levels.append(_Level(name, (child.st_dev, child.st_ino)))
        return child_fd

    def _climb(self, fd: int) -> int:
        """Swap ``fd``, on a child just left, for one on ``levels[-1]``."""
        parent_fd = _reopen("..", fd, self.levels[-1].identity)
        if parent_fd is None:
            parent_fd = self._walk_down()
        os.close(fd)
        return parent_fd

    def _walk_down(self) -> int:
        """Open the deepest level still where it was, from the root, forgetting the levels below it."""
        fd = os.dup(self.root_fd)
        for depth in range(1, len(self.levels)):
            child_fd = _reopen(self.levels[depth].name, fd, self.levels[depth].identity)
            if child_fd is None:
                del self.levels[depth:]
                break
            os.close(fd)
            fd = child_fd
        return fd


class _Remover(_Walk):
    """Empties the tree: unlinks what is not a directory, removes each directory on the way back up."""

    def __init__(self, root_fd: int, root: Path) -> None:
        super().__init__(root_fd)
        self.root = root
        self.failures = 0
        self.first_failure: OSError | None = None

    def scan(self, fd: int) -> bool:
        level = self.levels[-1]
        found = False
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name in level.skipped:
                        continue
                    found = True
                    if entry.is_dir(follow_symlinks=False):
                        level.pending.append(entry.name)
                        if len(level.pending) >= _PENDING_MAX:
                            break
                    else:
                        self._unlink(fd, entry.name)
        except OSError as error:
            self.fail("", error)
            return False
        return found

    def open_child(self, fd: int, name: str) -> int | None:
        try:
            return _open_dir_as_owner(name, fd)
        except FileNotFoundError:
            pass
        except NotADirectoryError:  # replaced by a file or a symlink since the scan
            self._unlink(fd, name)
        except OSError as error:
            self.fail(name, error)
        return None

    def left(self, fd: int, name: str) -> None:
        try:
            _as_owner(fd, os.rmdir, name)
        except FileNotFoundError:
            pass
        except OSError as error:
            self.fail(name, error)

    def fail(self, name: str, error: OSError) -> None:
        self.levels[-1].skipped.add(name)
        names = [level.name for level in self.levels[1:]]
        self.record(os.path.join(self.root, *names, name), error)

    def record(self, where: str, error: OSError) -> None:
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = OSError(error.errno, error.strerror, where)
            self.first_failure.__cause__ = error

    def raise_failures(self) -> None:
        first = self.first_failure
        if first is not None:
            message = f"{first.strerror} ({self.failures} entries could not be removed)"
            raise OSError(first.errno, message, first.filename) from first.__cause__

    def _unlink(self, fd: int, name: str) -> None:
        try:
            _as_owner(fd, os.unlink, name)
        except FileNotFoundError:
            pass
        except IsADirectoryError:  # became a directory since the scan
            self.levels[-1].pending.append(name)
        except OSError as error:
            self.fail(name, error)


class _Measurer(_Walk):
    """Adds up the disk use of the regular files, each inode once."""

    def __init__(self, root_fd: int) -> None:
        super().__init__(root_fd)
        self.total = 0
        self.linked: set[tuple[int, int]] = set()

    def scan(self, fd: int) -> bool:
        pending = self.levels[-1].pending
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.name)
                else:
                    self._count(entry)
        return False

    def open_child(self, fd: int, name: str) -> int | None:
        try:
            return _open_dir(name, fd)
        except OSError:  # vanished, unreadable or no longer a directory: not counted
            return None

    def _count(self, entry: os.DirEntry) -> None:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return
        if not stat.S_ISREG(info.st_mode) or info.st_dev != self.device:
            return
        if info.st_nlink > 1:
            if (info.st_dev, info.st_ino) in self.linked:
                return
            self.linked.add((info.st_dev, info.st_ino))
        self.total += info.st_blocks * _BLOCK


def _remove_entry(path: Path, parent_fd: int) -> None:
    try:
        root_fd = _open_dir_as_owner(path.name, parent_fd)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        _unlink_if_present(path.name, parent_fd)
        return
    try:
        remover = _Remover(root_fd, path)
        remover.run()
    finally:
        os.close(root_fd)
    try:
        os.rmdir(path.name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError as error:
        remover.record(str(path), error)
    remover.raise_failures()


def _entry_sizes(root_fd: int) -> Iterator[tuple[str, int]]:
    device = os.fstat(root_fd).st_dev
    with os.scandir(root_fd) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_dev == device and (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                yield entry.name, _measure(entry.name, root_fd)


def _measure(name: str, dir_fd: int) -> int:
    """``tree_size`` of the entry ``name`` under ``dir_fd``."""
    try:
        root_fd = _open_dir(name, dir_fd)
    except (FileNotFoundError, PermissionError):
        return 0
    except NotADirectoryError:
        return _file_use(name, dir_fd)
    try:
        measurer = _Measurer(root_fd)
        measurer.run()
        return measurer.total
    finally:
        os.close(root_fd)


def _file_use(name: str, dir_fd: int) -> int:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    return info.st_blocks * _BLOCK if stat.S_ISREG(info.st_mode) else 0


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _reopen(name: str, dir_fd: int, identity: tuple[int, int]) -> int | None:
    """An fd on ``name`` under ``dir_fd`` if that is still the directory ``identity`` names."""
    try:
        fd = _open_dir(name, dir_fd)
    except OSError:
        return None
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) == identity:
        return fd
    os.close(fd)
    return None


def _open_dir_as_owner(name: str, dir_fd: int) -> int:
    """Open the subdirectory ``name``, first giving its owner full access if it has none for us."""
    try:
        return _open_dir(name, dir_fd)
    except PermissionError as refused:
        try:
            _chmod_subdir(name, dir_fd, _OWNER_ALL)
        except OSError:
            raise refused from None
    return _open_dir(name, dir_fd)


def _chmod_subdir(name: str, dir_fd: int, mode: int) -> None:
    """chmod the subdirectory ``name`` without following a symlink, through an ``O_PATH`` fd's /proc link (fchmod
    refuses such an fd, which needs no access to the directory; glibc falls back the same way)."""
    path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", mode)
    finally:
        os.close(path_fd)


def _as_owner(dir_fd: int, operation: Callable[..., None], name: str) -> None:
    """``operation(name, dir_fd=dir_fd)``, retried once after giving the owner full access to the directory."""
    try:
        operation(name, dir_fd=dir_fd)
    except PermissionError as refused:
        try:
            os.fchmod(dir_fd, _OWNER_ALL)
        except OSError:
            raise refused from None
        operation(name, dir_fd=dir_fd)


def _unlink_if_present(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
