"""Installing the agent as a systemd service (README: The service): the unit, the system user, the home moved.

``plan_install`` checks everything and returns the steps; ``apply`` runs them. ``root`` prefixes every system path
(``/etc/passwd`` through ``useradd --prefix``), so tests install into a temporary directory.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from automaton_min.errors import UserError
from automaton_min.fileio import atomic_write

SERVICE = "automaton-min"
USER = "automaton"
STATE_DIR = "/var/lib/automaton"
UNIT_DIR = "/etc/systemd/system"
DEFAULT_BINARY = "/usr/local/bin/automaton-min"
# The one-file binary runs from its own copy in the state directory, which the unit lets it write: it updates itself.
SERVICE_BINARY = f"{STATE_DIR}/bin/automaton-min"
# Trees the unit hides from the service (ProtectHome=, PrivateTmp=): a binary there cannot be started.
HIDDEN_TREES = ("/home", "/root", "/run/user", "/tmp", "/var/tmp")
# Config keys holding paths: "~/.automaton/..." and relative paths follow the home when it moves, others do not.
PATH_KEYS = ("dbPath", "heartbeatConfigPath", "skillsDir")
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+@:/-]+")

START_COMMANDS = f"systemctl daemon-reload && systemctl enable --now {SERVICE}"
STOP_COMMANDS = f"systemctl stop {SERVICE} && systemctl daemon-reload"
OWNER_COMMAND = f"sudo -u {USER} {SERVICE_BINARY} --home {STATE_DIR}"

UNIT_FILE = Path(__file__).with_name("automaton-min.service")  # systemd/automaton-min.service, bundled


def render_unit(binary: str) -> str:
    """The unit running ``binary`` (``ExecStart=`` and the update roll-back in ``ExecStopPost=``)."""
    text = UNIT_FILE.read_text()
    return text.replace(f"ExecStart={SERVICE_BINARY} ", f"ExecStart={binary} ", 1).replace(
        f"update-rollback {SERVICE_BINARY}\n", f"update-rollback {binary}\n", 1)


def is_one_file_binary(path: str) -> bool:
    """The one-file binary (build/launcher.sh's head, then its archive), not a source install's entry point:
    ``service install`` copies it into the state directory."""
    from automaton_min.update.baked import one_file_id

    try:
        return one_file_id(path) is not None
    except OSError:
        return False


def system_path(root: Path, path: str) -> Path:
    """``path`` (absolute) under ``root``."""
    return Path(root) / path.lstrip("/")


def unit_path(root: Path) -> Path:
    return system_path(root, f"{UNIT_DIR}/{SERVICE}.service")


# ---------------------------------------------------------------------------------------------- the binary


def detect_binary() -> str | None:
    """The one-file binary this process was started from when frozen, else ``automaton-min`` on PATH or beside this
    interpreter."""
    if getattr(sys, "frozen", False):
        from automaton_min.update.baked import launched_from

        binary = launched_from()
        return str(binary) if binary is not None else None
    found = shutil.which("automaton-min")
    if found:
        return os.path.abspath(found)
    beside = Path(sys.executable).parent / "automaton-min"  # a virtualenv that is not activated
    return str(beside.absolute()) if os.access(beside, os.X_OK) else None


def _hidden(path: str) -> str | None:
    """The tree of ``HIDDEN_TREES`` that holds ``path``, if any."""
    return next((tree for tree in HIDDEN_TREES if path == tree or path.startswith(tree + "/")), None)


def visibility_problem(binary: str) -> str | None:
    """Why the service could not start ``binary`` (it, its target, or a script's interpreter lies in a hidden tree)."""
    paths = [binary, os.path.realpath(binary)]
    try:
        with open(binary, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        first = b""
    if first.startswith(b"#!") and first[2:].split():
        interpreter = first[2:].split()[0].decode("utf-8", "replace")
        paths += [interpreter, os.path.realpath(interpreter)]
    for path in paths:
        tree = _hidden(path)
        if tree:
            return f"the service cannot see {path}: the unit hides {tree} (ProtectHome=, PrivateTmp=)"
    return None


COPY_FIX = (f"put a one-file binary at {DEFAULT_BINARY} (sudo install -m 0755 <binary> {DEFAULT_BINARY}) and pass "
            f"--binary {DEFAULT_BINARY}")


def check_binary(binary: str | None, *, system_root: bool = True,
                 dry_run: bool = False) -> tuple[str, list[str], list[str]]:
    """The path for ``ExecStart=``, what must hold of it for a real install (each with its fix), and notes. A dry run
    takes any plain absolute path (``DEFAULT_BINARY`` if none is found), never one the unit cannot hold; under another
    root a hidden binary is only a note."""
    if not binary:
        if not dry_run:
            raise UserError(f"cannot find the automaton-min executable; {COPY_FIX}")
        binary = DEFAULT_BINARY
    if not os.path.isabs(binary) or not _PLAIN_PATH.fullmatch(binary):
        raise UserError(f"the binary path {binary!r} is not a plain absolute path the unit can hold; {COPY_FIX}")
    if is_one_file_binary(binary):
        return binary, [], []  # copied into the state directory: where it lies now does not matter
    before: list[str] = []
    hidden = visibility_problem(binary)
    if hidden and system_root:
        before.append(f"{hidden}; {COPY_FIX}")  # its fix puts an executable where the unit sees it
    elif not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        fix = COPY_FIX if hidden else f"put the one-file binary there: sudo install -m 0755 <binary> {binary}"
        before.append(f"{binary} is not an executable file; {fix}")
    return binary, before, [hidden] if hidden and not system_root else []


# ---------------------------------------------------------------------------------------------- users


def _entries(root: Path, name: str) -> list[list[str]]:
    path = system_path(root, f"/etc/{name}")
    try:
        return [line.split(":") for line in path.read_text(encoding="utf-8").splitlines() if line.count(":") >= 2]
    except FileNotFoundError:
        return []


def lookup_user(name: str, root: Path) -> tuple[int, int] | None:
    """(uid, gid) of ``name``: through NSS for the real system, from ``<root>/etc/passwd`` otherwise."""
    if Path(root) == Path("/"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return None
        return entry.pw_uid, entry.pw_gid
    for fields in _entries(root, "passwd"):
        if fields[0] == name and len(fields) >= 4:
            return int(fields[2]), int(fields[3])
    return None


def group_exists(name: str, root: Path) -> bool:
    if Path(root) == Path("/"):
        try:
            grp.getgrnam(name)
        except KeyError:
            return False
        return True
    return any(fields[0] == name for fields in _entries(root, "group"))


def nologin_shell() -> str:
    for shell in ("/usr/sbin/nologin", "/sbin/nologin"):
        if os.path.exists(shell):
            return shell
    return "/bin/false"


def useradd_argv(root: Path) -> list[str]:
    """``useradd`` for the service's user: a system user, its home the state directory (not created), no login."""
    argv = ["useradd", "--system", "--home-dir", STATE_DIR, "--no-create-home", "--shell", nologin_shell(),
            "--comment", "automaton-min agent"]
    argv += ["--gid", USER] if group_exists(USER, root) else ["--user-group"]
    if Path(root) != Path("/"):
        argv += ["--prefix", str(root)]
    return [*argv, USER]


def _useradd(argv: list[str]) -> None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise UserError(f"useradd is missing; create the system user {USER} yourself (home {STATE_DIR}, "
                        f"no login shell), then install again") from None
    if result.returncode != 0:
        why = " ".join((result.stderr or result.stdout).split()) or f"exit {result.returncode}"
        raise UserError(f"useradd failed: {why}; create the system user {USER} yourself, then install again")


def chown_tree(top: Path, uid: int, gid: int) -> None:
    """``top`` and everything in it owned by ``uid:gid`` (symbolic links themselves, never their targets)."""
    os.lchown(top, uid, gid)
    for directory, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.lchown(os.path.join(directory, name), uid, gid)


# ---------------------------------------------------------------------------------------------- plans


@dataclass
class Step:
    """One action: what it is, on what, and the function doing it."""

    what: str
    detail: str
    run: Callable[[], None]


@dataclass
class Plan:
    """The steps, notes on what stays as it is, and (in a dry run) what a real install needs first."""

    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)


def is_root() -> bool:
    return os.geteuid() == 0


def _config_notes(source: Path) -> list[str]:
    """Paths in automaton.json that do not move with the home (an absolute ``dbPath``, say)."""
    try:
        stored = orjson.loads((source / "automaton.json").read_bytes())
    except (OSError, ValueError):
        return []
    notes = []
    for key in PATH_KEYS:
        value = stored.get(key) if isinstance(stored, dict) else None
        if isinstance(value, str) and (os.path.isabs(value) or (value.startswith("~")
                                                                 and not value.startswith("~/.automaton/"))):
            notes.append(f"automaton.json's {key} is {value}, which does not move with the home; set it inside "
                         f"the home: {OWNER_COMMAND} config set {key} '~/.automaton/{Path(value).name}'")
    return notes


def _state_dir_problem(state: Path, source: Path) -> str | None:
    if state == source:
        return None
    if source in state.parents or state in source.parents:
        return f"the home {source} and the state directory {state} overlap; pass --home with another home"
    if state.is_symlink() or (state.exists() and not state.is_dir()):
        return f"{state} exists and is not a directory; remove it, then install again"
    if state.is_dir() and any(state.iterdir()):
        return (f"{state} is not empty (it may hold another agent's wallet); move it aside, or pass --home {state} "
                f"to install the home already there")
    return None


def plan_install(source: Path, *, root: Path = Path("/"), copy: bool = False, binary: str | None = None,
                 manage_user: bool = True, dry_run: bool = False) -> Plan:
    """Check everything and return the steps of ``service install``; raises ``UserError`` on the first problem."""
    from automaton_min.home import Home
    from automaton_min.runtime.run_lock import run_holder

    root = Path(root)
    if root == Path("/") and not is_root() and not dry_run:
        raise UserError("service install needs root (it creates a user and writes to /etc/systemd/system); "
                        "run: sudo automaton-min service install")
    binary, before, unseen = check_binary(binary or detect_binary(), system_root=root == Path("/"), dry_run=dry_run)
    if before and not dry_run:
        raise UserError(before[0])
    unit = unit_path(root)
    if unit.exists():
        raise UserError(f"{unit} exists already; run: automaton-min service uninstall (the state directory is "
                        f"kept), then install again")
    if not source.is_dir():
        raise UserError(f"no automaton home at {source}; run: automaton-min setup, or pass --home with the home "
                        f"to install")
    source = Path(os.path.realpath(source))
    if not (source / "automaton.json").exists():
        raise UserError(f"{source} is not set up (no automaton.json); run: automaton-min setup")
    running, pid = run_holder(Home(source))
    if running:
        raise UserError(f"an agent is running on {source} (pid {pid or '?'}); stop it first, then install again")
    state = Path(os.path.realpath(system_path(root, STATE_DIR)))
    problem = _state_dir_problem(state, source)
    if problem:
        raise UserError(problem)

    plan = Plan(notes=_config_notes(source) + unseen, before=before)
    user = lookup_user(USER, root)
    # A dry run on the real system shows what root would do, whoever runs it.
    do_user = manage_user and (is_root() or (dry_run and root == Path("/")))
    if not do_user:
        why = "not root" if manage_user else "--no-user"
        plan.notes.append(f"{why}: the system user {USER} is not created and nothing is chowned")
    elif user is None:
        argv = useradd_argv(root)
        plan.steps.append(Step("create user", f"{USER}: {shlex.join(argv)}", lambda: _useradd(argv)))
    else:
        plan.notes.append(f"the user {USER} exists (uid {user[0]}); it is used as it is")

    if state == source:
        plan.notes.append(f"the home is {state} already: nothing to move")
    elif copy:
        plan.steps.append(Step("copy home", f"{source} -> {state} (the original stays)",
                               lambda: _copy_home(source, state)))
    else:
        plan.steps.append(Step("move home", f"{source} -> {state}", lambda: _move_home(source, state)))

    unit_binary = binary
    if is_one_file_binary(binary):
        unit_binary, copy_to = SERVICE_BINARY, system_path(root, SERVICE_BINARY)
        plan.steps.append(Step("install binary", f"{binary} -> {copy_to} (the service's own copy: it updates itself)",
                               lambda: _install_binary(Path(binary), copy_to)))
    wallet = "wallet.json 0600, " if (source / "wallet.json").exists() else ""
    owner = f"owned by {USER}:{USER}, " if do_user else ""
    plan.steps.append(Step("protect", f"{state}: {owner}{wallet}the directory 0700",
                           lambda: _protect(state, root, do_user)))
    text = render_unit(unit_binary)
    plan.steps.append(Step("write unit", f"{unit} (ExecStart={unit_binary} --home {STATE_DIR} run)",
                           lambda: _write_unit(unit, text)))
    return plan


def _move_home(source: Path, state: Path) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    if state.is_dir():
        state.rmdir()  # empty (checked): the home takes its place
    shutil.move(str(source), str(state))  # a rename, or a copy and delete across file systems


def _copy_home(source: Path, state: Path) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    if state.is_dir():
        state.rmdir()
    shutil.copytree(source, state, symlinks=True)


def _install_binary(binary: Path, target: Path) -> None:
    target.parent.mkdir(mode=0o755, exist_ok=True)
    atomic_write(target, binary.read_bytes(), 0o755)


def _protect(state: Path, root: Path, do_user: bool) -> None:
    os.chmod(state, 0o700)
    wallet = state / "wallet.json"
    if wallet.exists() and not wallet.is_symlink():
        os.chmod(wallet, 0o600)
    if do_user:
        user = lookup_user(USER, root)
        if user is None:
            raise UserError(f"the user {USER} does not exist after useradd; create it, then install again")
        chown_tree(state, *user)


def _write_unit(unit: Path, text: str) -> None:
    unit.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(unit, text.encode("utf-8"), 0o644)


def plan_uninstall(*, root: Path = Path("/"), dry_run: bool = False) -> Plan:
    """The steps of ``service uninstall``: the unit file and its enablement links; the state directory stays."""
    root = Path(root)
    if root == Path("/") and not is_root() and not dry_run:
        raise UserError("service uninstall needs root (it removes a file in /etc/systemd/system); "
                        "run: sudo automaton-min service uninstall")
    unit = unit_path(root)
    if not unit.exists() and not unit.is_symlink():
        raise UserError(f"no unit at {unit}: automaton-min is not installed as a service")
    # What `systemctl disable` would remove (a link into another root dangles: glob would not see it).
    links = sorted(link for wants in unit.parent.glob("*.wants") if (link := wants / unit.name).is_symlink())
    plan = Plan()
    for link in links:
        plan.steps.append(Step("remove link", str(link), link.unlink))
    plan.steps.append(Step("remove unit", str(unit), unit.unlink))
    return plan


def apply(plan: Plan, announce: Callable[[Step], None] = lambda step: None) -> None:
    """Run the steps in order, announcing each after it is done."""
    for step in plan.steps:
        step.run()
        announce(step)
