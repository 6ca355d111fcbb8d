"""Canonical paths, and what the policy protects among them.

A path from a tool argument or a command is judged by where it really leads:
``~`` expanded, relative paths joined to a base (the workspace), ``.`` and ``..``
collapsed, and symlinks followed with ``os.path.realpath`` (also when the last
parts do not exist yet, and through dangling links). A path that names an
existing protected file through a hard link is caught by comparing inodes.

Protected things, by tag:

- ``SECRET``: holds a key. The home's ``wallet.json``, ``config.json`` (the
  provisioned API key) and ``automaton.json`` (it may hold provider keys); any
  file named ``wallet.json`` or ``automaton.json``; ``.env`` files. Never read.
- ``KEY``: private keys and certificates (``*.pem``, ``*.key``, ``private-key*``,
  ``id_rsa``-style names). Never read with ``read_file``.
- ``STATE``: the runtime's own files, never written or deleted: the secrets above
  plus ``state.db`` and its ``-wal``/``-shm`` (also at a configured ``dbPath``)
  and ``constitution.md``.
- ``SELF``: what makes the agent itself, written only by the agent's own turns:
  ``SOUL.md`` and the heartbeat configuration.
- ``SKILLS``: the skills directory (instructions the agent loads); like ``SELF``
  for other authorities, but the agent may also change it with ``exec``.
- ``HOME``: the home directory itself or a directory that contains it (deleting
  one deletes everything above).
- ``BLOCKED``: credential and system directories (``.ssh``, ``.gnupg``, ``.aws``,
  ``.kube``, ... and ``/etc/systemd``, ``/etc/passwd``, ``/etc/shadow``, ``/proc``,
  ``/sys``): never written. ``BLOCKED_READ`` marks the parts of them that hold
  secrets (the credential directories, ``/etc/shadow``, a process's ``environ``).
- ``CODE``: the policy engine's own source and the injection defence; never written.

"The home" is the configured home and, because a command may run where the
home has another path (a Conway sandbox keeps it at ``/root/.automaton``), any
directory named ``.automaton``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

SECRET, KEY, STATE, SELF, SKILLS, HOME, BLOCKED, BLOCKED_READ, CODE = (
    "secret", "key", "state", "self", "skills", "home", "blocked", "blocked_read", "code")

AUTOMATON_DIR = ".automaton"
HOME_SECRET_NAMES = ("wallet.json", "config.json", "automaton.json")
HOME_STATE_NAMES = (*HOME_SECRET_NAMES, "state.db", "state.db-wal", "state.db-shm", "constitution.md")
HOME_SELF_NAMES = ("SOUL.md", "heartbeat.yml")
ANYWHERE_SECRET_NAMES = ("wallet.json", "automaton.json")
ENV_SAMPLE_SUFFIXES = (".example", ".sample", ".template", ".dist")
KEY_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".keystore")
KEY_PREFIXES = ("private-key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
BLOCKED_SEGMENTS = (".ssh", ".gnupg", ".gpg", ".aws", ".azure", ".gcloud", ".kube", ".docker")
BLOCKED_PREFIXES = ("/etc/systemd", "/etc/passwd", "/etc/shadow", "/proc", "/sys")
BLOCKED_READ_PREFIXES = ("/etc/shadow", "/etc/gshadow")
_PROC_SECRET = re.compile(r"/proc/[^/]+/(environ|mem|auxv)\Z")

# The code that polices the agent: this package and the injection defence.
_AGENT_DIR = Path(__file__).resolve().parent.parent
CODE_DIRS = (Path(__file__).resolve().parent, _AGENT_DIR / "injection.py", _AGENT_DIR / "injection_patterns.py")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _is_env_file(name: str) -> bool:
    return name == ".env" or (name.startswith(".env.") and not name.endswith(ENV_SAMPLE_SUFFIXES))


class Protection:
    """What is protected for one home, workspace and configuration; build one per decision."""

    def __init__(self, home: Path, workspace: Path, *, db_path: Path | None = None, heartbeat_path: Path | None = None,
                 skills_dir: Path | None = None, user_home: str | None = None,
                 code_dirs: Iterable[Path] = CODE_DIRS) -> None:
        self.home_root = os.path.realpath(home)
        self.workspace = os.path.realpath(workspace)
        self.user_home = user_home if user_home is not None else os.path.expanduser("~")
        # What ``~`` may mean: the commands' HOME (the workspace in local mode) and this process's home.
        self.tildes = tuple(dict.fromkeys((self.workspace, os.path.realpath(self.user_home))))
        self.state_paths: set[str] = set()
        self.self_paths: set[str] = set()
        if db_path is not None:
            db = os.path.realpath(db_path)
            self.state_paths |= {db, db + "-wal", db + "-shm"}
        if heartbeat_path is not None:
            self.self_paths.add(os.path.realpath(heartbeat_path))
        self.code_dirs = tuple(os.path.realpath(d) for d in code_dirs)
        self.skills_dirs = tuple(dict.fromkeys(os.path.realpath(d) for d in (skills_dir, Path(home) / "skills") if d))
        self._inodes = self._protected_inodes()

    # ------------------------------------------------------------------ resolving

    def expand_tilde(self, raw: str) -> list[str]:
        """``raw`` with a leading ``~`` replaced by each meaning of ``~`` (``~user`` as the system says)."""
        if raw == "~" or raw.startswith("~/"):
            return [t + raw[1:] for t in self.tildes]
        if raw.startswith("~"):
            return [os.path.expanduser(raw)]
        return [raw]

    def canonical(self, raw: str, base: str | None = None) -> list[str]:
        """Every canonical path ``raw`` may mean, relative paths taken from ``base`` (the workspace by default)."""
        if "\x00" in raw:
            raise ValueError("a path cannot contain a NUL byte")
        out = []
        for expanded in self.expand_tilde(raw):
            joined = os.path.join(base or self.workspace, expanded)
            out.append(os.path.realpath(joined))  # resolves `..` after symlinks, as the kernel does
        return out

    def variants(self, raw: str) -> list[str]:
        """The path as given and as it would read after ``$HOME`` expansion or URL decoding (a server may decode it)."""
        found = [raw]
        for candidate in (re.sub(r"\$\{HOME\}|\$HOME\b", "~", raw), unquote(raw)):
            if candidate not in found:
                found.append(candidate)
        return found

    # ------------------------------------------------------------------ judging

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
        found: set[str] = set()
        name = os.path.basename(path)
        lowered = name.lower()
        rel = self.home_relative(path)
        if rel is not None:
            if rel == "":
                found.add(HOME)
            if rel in HOME_SECRET_NAMES:
                found |= {SECRET, STATE}
            if rel in HOME_STATE_NAMES:
                found.add(STATE)
            if rel in HOME_SELF_NAMES:
                found.add(SELF)
        if _inside(self.home_root, path):
            found.add(HOME)
        if name in ANYWHERE_SECRET_NAMES or _is_env_file(name):
            found.add(SECRET)
        if lowered.endswith(KEY_SUFFIXES) or lowered.startswith(KEY_PREFIXES):
            found.add(KEY)
        if path in self.state_paths:
            found.add(STATE)
        if path in self.self_paths:
            found.add(SELF)
        segments = path.split("/")
        if any(s in BLOCKED_SEGMENTS for s in segments):
            found |= {BLOCKED, BLOCKED_READ}
        if any(_inside(path, p) for p in BLOCKED_PREFIXES):
            found.add(BLOCKED)
        if any(_inside(path, p) for p in BLOCKED_READ_PREFIXES) or _PROC_SECRET.search(path):
            found.add(BLOCKED_READ)
        if any(_inside(path, d) for d in self.code_dirs):
            found.add(CODE)
        if any(_inside(path, d) for d in self.skills_dirs) or (rel is not None and _inside(rel, "skills")):
            found.add(SKILLS)
        found |= self._inode_tags(path)
        return frozenset(found)

    def glob_tags(self, directory: str, pattern: str) -> frozenset[str]:
        """Tags of the protected home files a glob ``pattern`` in ``directory`` could name."""
        rel = self.home_relative(directory)
        if rel != "":
            return frozenset()
        found: set[str] = set()
        for name in (*HOME_STATE_NAMES, *HOME_SELF_NAMES):
            if fnmatch.fnmatchcase(name, pattern):
                found |= self.tags(os.path.join(directory, name))
        return frozenset(found)

    def _protected_inodes(self) -> dict[tuple[int, int], frozenset[str]]:
        """Inodes of the protected files that exist now, so a hard link to one is recognised."""
        inodes: dict[tuple[int, int], frozenset[str]] = {}
        names = (*HOME_STATE_NAMES, *HOME_SELF_NAMES)
        candidates = [os.path.join(self.home_root, n) for n in names] + sorted(self.state_paths | self.self_paths)
        for candidate in candidates:
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            inodes[(st.st_dev, st.st_ino)] = self.tags_by_name(candidate)
        return inodes

    def tags_by_name(self, path: str) -> frozenset[str]:
        rel = self.home_relative(path) or ""
        found = set()
        if rel in HOME_SECRET_NAMES:
            found |= {SECRET, STATE}
        if rel in HOME_STATE_NAMES or path in self.state_paths:
            found.add(STATE)
        if rel in HOME_SELF_NAMES or path in self.self_paths:
            found.add(SELF)
        return frozenset(found)

    def _inode_tags(self, path: str) -> frozenset[str]:
        if not self._inodes:
            return frozenset()
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return frozenset()
        return self._inodes.get((st.st_dev, st.st_ino), frozenset())


def protection_for(env) -> Protection:  # env: PolicyEnv (kept untyped to avoid an import cycle)
    """The ``Protection`` for a policy environment: its home, workspace, ``dbPath`` and heartbeat file."""
    from automaton_min.home import Home

    home = Home(env.home)
    def configured(key: str, default: str) -> Path:
        value = env.setting(key)
        return home.resolve(value if isinstance(value, str) and value else default)

    return Protection(env.home, env.workspace, db_path=configured("dbPath", "state.db"),
                      heartbeat_path=configured("heartbeatConfigPath", "heartbeat.yml"),
                      skills_dir=configured("skillsDir", "skills"))
