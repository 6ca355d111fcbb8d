"""Canonical paths, and what the path rules protect among them (``Protection.tags``).

A path is judged by where it really leads: ``~`` means both the commands' HOME (the workspace in local mode) and
this process's home; symlinks are followed before ``..`` collapses, even links that lead nowhere yet; a hard link
to a protected file is known by its inode. Any directory named ``.automaton`` counts as a home (a Conway sandbox
keeps one at ``/root/.automaton``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

from automaton_min.agent.policy.types import PolicyEnv
from automaton_min.confine.protected import HOME_PROTECTED, HOME_SECRETS, is_key_name, is_secret_name
from automaton_min.home import Home

SECRET, KEY, STATE, BLOCKED, BLOCKED_READ, CODE = "secret", "key", "state", "blocked", "blocked_read", "code"

AUTOMATON_DIR = ".automaton"
BLOCKED_SEGMENTS = (".ssh", ".gnupg", ".gpg", ".aws", ".azure", ".gcloud", ".kube", ".docker")
BLOCKED_PREFIXES = ("/etc/systemd", "/etc/passwd", "/etc/shadow", "/proc", "/sys")
BLOCKED_READ_PREFIXES = ("/etc/shadow", "/etc/gshadow")
_PROC_SECRET = re.compile(r"/proc/[^/]+/(environ|mem|auxv)\Z")

# The code that polices the agent: this package and the injection defence.
_SOCIAL_DIR = Path(__file__).resolve().parents[2] / "social"
CODE_DIRS = (Path(__file__).resolve().parent, _SOCIAL_DIR / "injection.py", _SOCIAL_DIR / "injection_patterns.py")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Protection:
    """What is protected for one home, workspace and configuration; build one per decision."""

    def __init__(self, home: Path, workspace: Path, *, configured: Iterable[Path] = (), user_home: str | None = None,
                 code_dirs: Iterable[Path] = CODE_DIRS) -> None:
        self.home_root = os.path.realpath(home)
        self.workspace = os.path.realpath(workspace)
        user_home = user_home if user_home is not None else os.path.expanduser("~")
        self.tildes = tuple(dict.fromkeys((self.workspace, os.path.realpath(user_home))))
        self.state_paths = tuple(os.path.realpath(p) for p in configured)
        self.code_dirs = tuple(os.path.realpath(d) for d in code_dirs)
        self._inodes = self._protected_inodes()

    def canonical(self, raw: str) -> list[str]:
        """Every canonical path ``raw`` may mean (each meaning of a leading ``~``), relative to the workspace."""
        if "\x00" in raw:
            raise ValueError("a path cannot contain a NUL byte")
        if raw == "~" or raw.startswith("~/"):
            expanded = [t + raw[1:] for t in self.tildes]
        else:
            expanded = [os.path.expanduser(raw)]
        return [os.path.realpath(os.path.join(self.workspace, e)) for e in expanded]

    @staticmethod
    def variants(raw: str) -> list[str]:
        """The path as given and as it reads after ``$HOME`` expansion or URL decoding (a server may decode it)."""
        found = [raw]
        for candidate in (re.sub(r"\$\{HOME\}|\$HOME\b", "~", raw), unquote(raw)):
            if candidate not in found:
                found.append(candidate)
        return found

    def home_relative(self, path: str) -> str | None:
        """The part of a canonical path inside a home (``""`` for the home itself), or ``None``."""
        if _inside(path, self.home_root):
            return path[len(self.home_root):].lstrip("/")
        parts = path.split("/")
        if AUTOMATON_DIR in parts:
            last = len(parts) - 1 - parts[::-1].index(AUTOMATON_DIR)
            return "/".join(parts[last + 1:])
        return None

    def tags(self, path: str) -> frozenset[str]:
        """What protects this canonical path (empty when nothing does)."""
        found = set(self._name_tags(path))
        name = os.path.basename(path)
        if is_secret_name(name):
            found.add(SECRET)
        if is_key_name(name):
            found.add(KEY)
        segments = path.split("/")
        if any(s in BLOCKED_SEGMENTS for s in segments):
            found |= {BLOCKED, BLOCKED_READ}
        if any(_inside(path, p) for p in BLOCKED_PREFIXES):
            found.add(BLOCKED)
        if any(_inside(path, p) for p in BLOCKED_READ_PREFIXES) or _PROC_SECRET.search(path):
            found.add(BLOCKED_READ)
        if any(_inside(path, d) for d in self.code_dirs):
            found.add(CODE)
        found |= self._inode_tags(path)
        return frozenset(found)

    def _name_tags(self, path: str) -> frozenset[str]:
        """Tags from the home's list and the configured paths alone."""
        rel = self.home_relative(path)
        found = set()
        if rel is not None and any(_inside(rel, entry) for entry in HOME_PROTECTED):
            found.add(STATE)
        if rel in HOME_SECRETS:
            found.add(SECRET)
        if any(_inside(path, p) for p in self.state_paths):
            found.add(STATE)
        return frozenset(found)

    def _protected_inodes(self) -> dict[tuple[int, int], frozenset[str]]:
        """Inodes of the protected files that exist now, so a hard link to one is recognised."""
        inodes: dict[tuple[int, int], frozenset[str]] = {}
        for candidate in [os.path.join(self.home_root, n) for n in HOME_PROTECTED] + list(self.state_paths):
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            inodes[(st.st_dev, st.st_ino)] = self._name_tags(candidate)
        return inodes

    def _inode_tags(self, path: str) -> frozenset[str]:
        if not self._inodes:
            return frozenset()
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return frozenset()
        return self._inodes.get((st.st_dev, st.st_ino), frozenset())


def protection_for(env: PolicyEnv) -> Protection:
    """The ``Protection`` for a policy environment: its home, workspace, ``dbPath``, heartbeat file and skills."""
    home = Home(env.home)

    def configured(key: str, default: str) -> Path:
        value = env.setting(key)
        return home.resolve(value if isinstance(value, str) and value else default)

    db = configured("dbPath", "state.db")
    return Protection(env.home, env.workspace, configured=(
        db, Path(f"{db}-wal"), Path(f"{db}-shm"), configured("heartbeatConfigPath", "heartbeat.yml"),
        configured("skillsDir", "skills")))
