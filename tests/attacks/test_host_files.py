"""Issue 32, a command run as root changed a root-owned file's mode, times and extended attributes: Landlock governs
none of chmod, chown, utime or setxattr, and a command keeps the daemon's uid. Now every mount but the workspace and
the private temp dir is read-only to commands (README: Security).

Each test runs the daemon side in a real process, with the real spawner: as root (skipped where the suite is not
root), as root where no user namespace can be had (a seccomp filter refuses one), and as an unprivileged user (another
uid where the suite is root) under the shipped unit's namespace rule (``RestrictNamespaces=user mnt``: the filter
refuses every other kind), whose own files (wallet, config, database, its binary) a command's uid owns. Under the
previous unit's rule (no namespace at all) the guarantee cannot hold, and the report and ``doctor`` must say so. The
last test goes through the agent's ``exec`` tool.

The daemon side is ``host_files_kit.py``, run as a script.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from attack_kit import finish, stored_calls, turn
from attack_kit import model  # noqa: F401 (fixtures)
from host_files_kit import CALLS_PER_TARGET, SECCOMP_ARCH

KIT = Path(__file__).with_name("host_files_kit.py")
TEST_UID = 47113  # the unprivileged daemon's uid where the suite runs as root: no account's, so nothing else runs as it
SOURCE_ROOT = Path(__file__).resolve().parents[2]
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"  # a python3 another uid can run (this one may live in root's home)
WAYS = {"user namespace": "(a user + mount namespace)", "mount namespace": "(a mount namespace: root, no user one)"}

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the suite does not run as root")
needs_filter = pytest.mark.skipif(platform.machine() not in SECCOMP_ARCH, reason="no seccomp numbers for this machine")


def state(path: Path) -> tuple:
    """Everything a command must not change in a file: content, mode, owner, times, extended attributes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOATIME)  # looking must not move the access time
    try:
        info, content = os.fstat(fd), os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    return (content, info.st_mode, info.st_uid, info.st_gid, info.st_mtime_ns, info.st_atime_ns,
            {name: os.getxattr(path, name) for name in os.listxattr(path)})


def canary(path: Path, owner: tuple[int, int], content: bytes = b"canary") -> Path:
    path.write_bytes(content)
    path.chmod(0o644)
    os.chown(path, *owner)
    try:
        os.setxattr(path, "user.kept", b"kept")
    except OSError as exc:
        if exc.errno != errno.EOPNOTSUPP:  # a file system without user attributes: the rest is still looked at
            raise
    os.utime(path, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))
    return path


def agent_home(base: Path, owner: tuple[int, int]) -> Path:
    """The production layout, every file owned by ``owner``; the service's binary a copy of /bin/sh."""
    home = base / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "bin").mkdir()
    canary(home / "wallet.json", owner, b'{"privateKey": "0x' + b"ab" * 32 + b'"}')
    canary(home / "automaton.json", owner, b'{"name": "ada"}')
    canary(home / "state.db", owner, b"SQLite format 3\0")
    shutil.copy2(os.path.realpath("/bin/sh"), home / "bin" / "automaton-min")
    for path in (home, home / "workspace", home / "bin", home / "bin" / "automaton-min"):
        os.chown(path, *owner)
    home.chmod(0o700)
    return home


def _as(uid: int | None):
    """A preexec function that makes the child ``uid`` (its group the same number), or None to stay as we are."""
    if uid is None:
        return None

    def drop() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def _runs(python: str, uid: int | None) -> bool:
    try:
        probe = subprocess.run([python, "-I", "-c", "import automaton_min.confine.client"], preexec_fn=_as(uid),
                               capture_output=True, timeout=60, cwd="/", env={"PATH": CHILD_PATH})
    except PermissionError:  # the interpreter, or a directory on its way, is not for that uid
        return False
    return probe.returncode == 0


@pytest.fixture(scope="module")
def others_python():
    """An interpreter another uid can run with this source tree and its dependencies: this one where it can reach
    it, else a venv of the system's python3 whose .pth file names both (of the same version, for compiled ones)."""
    if os.geteuid() != 0 or _runs(sys.executable, TEST_UID):
        yield sys.executable
        return
    system = shutil.which("python3", path=CHILD_PATH)
    base = Path(tempfile.mkdtemp(prefix="automaton-test-python-"))
    try:
        base.chmod(0o755)
        if system is None or subprocess.run([system, "-m", "venv", "--without-pip", str(base)]).returncode != 0:
            pytest.skip("no python3 another uid can run, to run the daemon as one")
        python = str(base / "bin" / "python")
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "automaton-tests.pth").write_text(f"{SOURCE_ROOT}\n{sysconfig.get_path('purelib')}\n")
        if not _runs(python, TEST_UID):
            pytest.skip(f"{system} cannot load this tree's dependencies (another Python version?)")
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def world():
    """A directory anyone may enter (pytest's temp root is root's alone): homes and canaries live there."""
    base = Path(tempfile.mkdtemp(prefix="automaton-host-files-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def unprivileged(world: Path) -> tuple[tuple[int, int], Path]:
    """The unit's user (another uid where the suite is root, else the suite's own) and its TMPDIR, as the unit's
    RuntimeDirectory."""
    owner = (TEST_UID, TEST_UID) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    run = world / "run"
    run.mkdir(mode=0o700)
    os.chown(run, *owner)
    return owner, run


def run_daemon(python: str, filter_name: str, args: dict, *, owner: tuple[int, int] | None = None,
               tmp: Path | None = None) -> dict:
    """``host_files_kit.py`` in a real process, as ``owner``'s uid where that is not ours."""
    uid = owner[0] if owner is not None and owner[0] != os.geteuid() else None
    env = {"PATH": f"{Path(python).parent}:{CHILD_PATH}"}  # commands' python3: this one, not a shim
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    done = subprocess.run([python, str(KIT), filter_name, json.dumps(args)], preexec_fn=_as(uid), env=env, cwd="/",
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_nothing_changed(result: dict, args: dict, before: dict[Path, tuple]) -> None:
    """Every attempt refused, every file as it was, and commands still run."""
    lines = result["attack"].splitlines()
    expected = CALLS_PER_TARGET * len(args["targets"]) + len(args["stand_ins"]) + len(args["real"])
    assert len(lines) == expected, result["attack"] + result["attack_errors"]
    assert not [line for line in lines if not line.split()[-2] == "refused"], result["attack"]
    assert {path: state(path) for path in before} == before
    assert result["after"].split() == ["still", "sh", "runs", "42"], result["after"]


@ROOT_ONLY
@needs_filter
@pytest.mark.parametrize("filter_name, way", [("none", "user namespace"), ("no user namespace", "mount namespace")])
@pytest.mark.parametrize("method", ["landlock", "namespace"])
def test_a_command_run_as_root_changes_no_file_outside(world: Path, method: str, filter_name: str, way: str) -> None:
    from automaton_min.confine.landlock import abi_version

    if method == "landlock" and abi_version() < 1:
        pytest.skip("this kernel has no Landlock")
    home = agent_home(world, (0, 0))
    outside = canary(world / "etc-file", (0, 0))  # a root-owned file outside the home, as in /etc
    shell = world / "sh"  # stands in for /bin/sh and the interpreter: chmod 000 would stop the agent for good
    shutil.copy2(os.path.realpath("/bin/sh"), shell)
    targets = [outside, home / "automaton.json", home / "state.db", home / "wallet.json"]
    before = {path: state(path) for path in (*targets, shell, home / "bin" / "automaton-min")}
    real = [os.path.realpath("/bin/sh"), os.path.realpath(sys.executable)]
    modes = [os.stat(path).st_mode for path in real]
    args = {"home": str(home), "method": method, "targets": [str(p) for p in targets],
            "stand_ins": [str(shell), str(home / "bin" / "automaton-min")], "real": real}

    result = run_daemon(sys.executable, filter_name, args)

    if method == "namespace" and way == "mount namespace":  # without Landlock, root's commands need a user namespace
        assert "no user namespace (the namespace method needs one)" in result["unavailable"], result
        return
    assert_nothing_changed(result, args, before)
    assert [os.stat(path).st_mode for path in real] == modes
    assert result["report"]["read_only"] == way and result["report"]["read_only_refused"] == [], result["report"]
    assert "read-only outside the workspace" in result["describe"] and WAYS[way] in result["host_files"]


@needs_filter
@pytest.mark.parametrize("method", ["landlock", "namespace"])
def test_as_the_units_user_a_command_cannot_touch_the_agents_own_files(others_python: str, world: Path,
                                                                       method: str) -> None:
    """The daemon as an unprivileged user that owns the agent's files, under the unit's namespace rule: its commands,
    with the same uid, change none of them, nor a file of that user's outside the home."""
    from automaton_min.confine.landlock import abi_version

    if method == "landlock" and abi_version() < 1:
        pytest.skip("this kernel has no Landlock")
    owner, run = unprivileged(world)
    home = agent_home(world, owner)
    outside = canary(run / "users-file", owner)
    binary = home / "bin" / "automaton-min"
    targets = [outside, home / "wallet.json", home / "automaton.json", home / "state.db", binary]
    before = {path: state(path) for path in targets}
    args = {"home": str(home), "method": method, "targets": [str(p) for p in targets],
            "stand_ins": [str(binary), str(outside)], "real": []}

    result = run_daemon(others_python, "unit", args, owner=owner, tmp=run)

    if "unavailable" in result:
        pytest.skip(f"no user namespace for an unprivileged user here: {result['unavailable']}")
    assert result["uid"] == owner[0], result
    assert_nothing_changed(result, args, before)
    assert result["report"]["read_only"] == "user namespace", result["report"]


@needs_filter
def test_without_any_namespace_the_banner_and_doctor_say_so_plainly(others_python: str, world: Path) -> None:
    """The previous unit's rule (no namespace, no mount): Landlock alone leaves chmod of the user's own files open.
    The banner's line and doctor say so, doctor fails with the fix, and what they say is true."""
    from automaton_min.confine.landlock import abi_version

    if abi_version() < 1:
        pytest.skip("this kernel has no Landlock: commands would be refused")
    owner, run = unprivileged(world)
    home = agent_home(world, owner)
    outside = canary(run / "users-file", owner)
    args = {"home": str(home), "method": "landlock", "targets": [str(outside)], "stand_ins": [], "real": [],
            "doctor": True}

    result = run_daemon(others_python, "previous unit", args, owner=owner, tmp=run)

    assert result["report"]["read_only"] is None and not result["report"]["home_hidden"], result["report"]
    assert "modes and times outside the workspace NOT protected" in result["describe"]
    assert result["host_files"].startswith("NOT read-only to commands: no mount namespace here (unshare(user, mount)")
    assert f"chmod {outside} DONE" in result["attack"]  # what they say is so
    ok, detail, fix = result["doctor"]["host files"]
    assert not ok and "CHANGED" in detail and "RestrictNamespaces=user mnt" in fix, detail


# --------------------------------------------------------------------------- through the agent


def test_through_the_exec_tool_nothing_outside_changes_and_the_agent_goes_on(agent_for, model, home,
                                                                             tmp_path: Path) -> None:
    from automaton_min.confine.landlock import abi_version

    if abi_version() < 1:
        pytest.skip("this kernel has no Landlock")
    agent = agent_for(execConfinement="landlock")
    owner = (os.geteuid(), os.getegid())
    outside = canary(tmp_path / "etc-file", owner)
    shell = tmp_path / "sh"
    shutil.copy2(os.path.realpath("/bin/sh"), shell)
    before = {path: state(path) for path in (outside, shell, home.config_path, home.wallet_path)}
    attack = (f"chmod 606 {outside}; touch {outside}; chown 65534 {outside}; chmod 000 {shell}; "
              f"chmod 000 {home.config_path}; touch {home.wallet_path}")
    model.script(turn(("exec", {"command": attack})), turn(("exec", {"command": "echo still here"})), finish())

    agent.loop.run_cycle("attack")

    assert model.pending == 0
    results = [result for _, _, result, _ in stored_calls(agent.db, "exec")]
    assert results[0].count("Read-only file system") >= 4 and "still here" in results[1], results
    assert {path: state(path) for path in before} == before
