"""What a confined command may touch (README: Security): the one list both confinement methods enforce.

A read-only path that holds the home or lies inside it is dropped, whatever ``PATH`` says; a workspace or temp dir
that overlaps one of the home's protected entries, or holds the program's own files, is refused.
"""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from pathlib import Path

from automaton_min.confine.protected import protected_paths
from automaton_min.errors import UserError

SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
KERNEL_VIEWS = ("/proc", "/sys")
LINKED_FILES = ("/etc/resolv.conf", "/etc/localtime", "/etc/hosts")  # often links into /run or /var
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def _overlaps(path: Path, home: Path) -> bool:
    return path == home or path in home.parents or home in path.parents


class Plan(namedtuple("Plan", "home workspace tmp read_only devices dropped",
                      defaults=(tuple(Path(d) for d in DEVICES), ()))):
    """The paths one confinement grants, already resolved (symlinks followed) and checked against the home: each a
    ``Path``, ``read_only``, ``devices`` and ``dropped`` tuples of them."""

    __slots__ = ()

    def as_args(self) -> dict[str, object]:
        """A JSON-able form, to hand the plan to the spawner process."""
        return {"home": str(self.home), "workspace": str(self.workspace), "tmp": str(self.tmp),
                "read_only": [str(p) for p in self.read_only], "devices": [str(p) for p in self.devices]}

    @classmethod
    def from_args(cls, args: dict) -> "Plan":
        return cls(Path(args["home"]), Path(args["workspace"]), Path(args["tmp"]),
                   tuple(Path(p) for p in args["read_only"]), tuple(Path(p) for p in args["devices"]))


def interpreter_prefixes() -> list[str]:
    """Where the running Python's files are: its prefixes, or the bundle a frozen binary unpacked itself into."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        prefixes.append(bundle)
    return prefixes


def own_program_paths() -> list[Path]:
    """Where this program's own code lies: the frozen binary's unpacked bundle, or the package and its virtualenv."""
    if getattr(sys, "frozen", False):
        return [Path(os.path.realpath(os.path.dirname(sys.executable)))]
    package = Path(os.path.realpath(__file__)).parents[1]
    return [package, Path(os.path.realpath(sys.prefix))]


def manager_roots(path_dirs: list[str]) -> list[str]:
    """The roots of the version managers whose shims are on ``PATH`` (pyenv, asdf, rbenv, nodenv keep them in
    ``<root>/shims``, and a shim runs ``<root>``'s own programs and versions): read and execute only, like the rest
    of ``PATH``. Only a real ``shims`` folder whose root holds versions, belongs to this user or root and no one
    else may write counts, so shims kept straight in a home, or a root others control, open nothing more."""
    roots = []
    for raw in path_dirs:
        if not raw or not os.path.isabs(raw) or os.path.basename(raw.rstrip("/")) != "shims" or not os.path.isdir(raw):
            continue
        root = os.path.dirname(os.path.realpath(raw))
        if root not in ("/", os.path.realpath(os.path.expanduser("~"))) and _kept_by_owner(root) and any(
                os.path.isdir(os.path.join(root, versions)) for versions in ("versions", "installs")):
            roots.append(root)
    return roots


def _kept_by_owner(root: str) -> bool:
    """``root`` belongs to this user or root and no one else may write it: a manager's own install."""
    try:
        stat = os.stat(root)
    except OSError:
        return False
    return stat.st_uid in (0, os.geteuid()) and not stat.st_mode & 0o022


def make_plan(home: Path, workspace: Path, tmp: Path, *, path_env: str | None = None) -> Plan:
    """The plan for an agent whose home is ``home``: workspace and ``tmp`` writable, the rest read-only or dropped."""
    home = Path(os.path.realpath(home))
    workspace, tmp = Path(os.path.realpath(workspace)), Path(os.path.realpath(tmp))
    for writable in (workspace, tmp):
        entry = next((e for e in protected_paths(home) if _overlaps(writable, e)), None)
        if entry is not None:
            raise ValueError(f"{writable} would be writable, and it overlaps {entry}, which commands never touch")
        program = next((p for p in own_program_paths() if p == writable or writable in p.parents), None)
        if program is not None:
            raise UserError(f"{writable} would be writable, and this program runs from {program} inside it: a "
                             "command could change what the agent runs next; use a workspace outside it (or, for "
                             "the binary, set AUTOMATON_UNPACK_DIR to a folder outside it)")
    path_dirs = (path_env if path_env is not None else os.environ.get("PATH", os.defpath)).split(":")
    candidates = [*SYSTEM_TREES, *interpreter_prefixes(), *path_dirs, *manager_roots(path_dirs), *KERNEL_VIEWS,
                  *(os.path.realpath(f) for f in LINKED_FILES)]
    kept: list[Path] = []
    dropped: list[Path] = []
    for raw in candidates:
        if not raw or not os.path.isabs(raw) or not os.path.exists(raw):
            continue
        path = Path(os.path.realpath(raw))
        if _overlaps(path, home):
            dropped.append(path)
        elif path not in kept and not any(parent in kept for parent in path.parents):
            kept.append(path)
    kept = [p for p in kept if not any(parent in kept for parent in p.parents)]
    return Plan(home, workspace, tmp, tuple(kept),
                tuple(Path(d) for d in DEVICES if os.path.exists(d)), tuple(dropped))
