"""``automaton-min service install`` / ``uninstall`` as real processes into a temporary root, and the unit itself.

The CLI runs for real (``--root`` prefixes the unit directory, the state directory and ``/etc/passwd``), on real
files. ``systemd-analyze verify`` and ``security --offline=true`` check the checked-in unit (skipped without
systemd-analyze). The last test starts the agent's confinement the way the unit leaves it: only user and mount
namespaces allowed (RestrictNamespaces=user mnt, @mount) and writable+executable memory refused
(MemoryDenyWriteExecute=); and the way the previous unit left it, no namespace at all, which doctor must call a failure.
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from automaton_min.runtime import install

REPO = Path(__file__).resolve().parent.parent
CHECKED_IN_UNIT = REPO / "systemd" / "automaton-min.service"
STATE = "var/lib/automaton"
UNIT = "etc/systemd/system/automaton-min.service"


def detected_binary() -> str:
    """What the CLI should find: ``automaton-min`` on PATH, else beside this interpreter (a virtualenv)."""
    return os.path.abspath(shutil.which("automaton-min") or str(Path(sys.executable).parent / "automaton-min"))


def expected_unit(binary: str) -> str:
    """The checked-in unit running ``binary``: in ExecStart= and in ExecStopPost='s roll-back."""
    service = "/var/lib/automaton/bin/automaton-min"
    return CHECKED_IN_UNIT.read_text().replace(f"ExecStart={service} ", f"ExecStart={binary} ").replace(
        f"update-rollback {service}\n", f"update-rollback {binary}\n")


def tree(top: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``top`` with its mode and (for files) its bytes."""
    found = {}
    for path in sorted(top.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(top))] = (info.st_mode, path.read_bytes() if path.is_file() else None)
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


def test_the_unit_install_writes_is_the_checked_in_unit():
    assert install.render_unit(install.SERVICE_BINARY) == CHECKED_IN_UNIT.read_text()
    text = CHECKED_IN_UNIT.read_text()
    for line in ("Type=notify", "NotifyAccess=main", "StateDirectory=automaton", "RuntimeDirectory=automaton",
                 "CacheDirectory=automaton", "CacheDirectoryMode=0700",
                 "Environment=TMPDIR=/run/automaton", "KillMode=mixed", "UnsetEnvironment=WATCHDOG_PID",
                 "SystemCallFilter=@system-service @mount landlock_create_ruleset landlock_add_rule "
                 "landlock_restrict_self adjtimex", "RestrictNamespaces=user mnt",
                 "ExecStart=/var/lib/automaton/bin/automaton-min --home /var/lib/automaton run", "User=automaton"):
        assert line in text.splitlines(), line
    seconds = {"min": 60, "s": 1}
    stop = re.search(r"^TimeoutStopSec=(\d+)(min|s)$", text, re.M)
    assert int(stop.group(1)) * seconds[stop.group(2)] > 30 + 10  # shutdownGraceSeconds' default, then the scheduler


def test_install_moves_the_home_and_writes_the_unit(cli, set_up, root):
    before = tree(set_up.root)
    result = cli("service", "install", "--root", str(root), "--no-user")
    assert result.code == 0, result.stderr

    state = root / STATE
    assert not set_up.root.exists()  # moved, not copied
    assert tree(state) == before  # every file, mode and byte (wallet.json 0600 included)
    assert mode(state) == 0o700 and mode(state / "wallet.json") == 0o600
    unit = root / UNIT
    assert unit.read_text() == expected_unit(detected_binary())
    assert mode(unit) == 0o644
    assert "systemctl daemon-reload && systemctl enable --now automaton-min" in result.stdout
    assert "sudo -u automaton /var/lib/automaton/bin/automaton-min --home /var/lib/automaton status" in result.stdout

    status = cli("--home", str(state), "status", "--json")  # the moved home works where it is now
    assert status.code == 0, status.stderr
    assert '"name": "ada"' in status.stdout


def test_install_copy_keeps_the_original(cli, set_up, root):
    before = tree(set_up.root)
    result = cli("service", "install", "--root", str(root), "--no-user", "--copy")
    assert result.code == 0, result.stderr
    assert "copy home" in result.stdout
    assert tree(set_up.root) == before
    assert tree(root / STATE) == before
    assert mode(root / STATE / "wallet.json") == 0o600


def test_dry_run_changes_nothing(cli, set_up, root, tmp_path):
    before = tree(tmp_path)
    result = cli("service", "install", "--root", str(root), "--no-user", "--dry-run")
    assert result.code == 0, result.stderr
    assert tree(tmp_path) == before
    lines = result.stdout.splitlines()
    assert "Dry run, nothing was changed. service install would:" in lines
    steps = [line.split()[:2] for line in lines if line.startswith("  ")]
    assert steps == [["move", "home"], ["protect", f"{root / STATE}:"], ["write", "unit"]]
    assert f"ExecStart={detected_binary()} --home /var/lib/automaton run" in result.stdout
    assert "systemctl daemon-reload && systemctl enable --now automaton-min" in result.stdout

    uninstall = cli("service", "uninstall", "--root", str(root), "--dry-run")
    assert uninstall.code == 2 and "not installed" in uninstall.stderr  # nothing was installed


# A path where no binary is: a dry run plans with it, a real install refuses it.
MISSING_BINARY = "/nonexistent-automaton-min-test/bin/automaton-min"


def test_dry_run_plans_with_a_binary_that_is_not_there_yet(cli, set_up, root, tmp_path):
    assert not os.path.exists(MISSING_BINARY)
    before = tree(tmp_path)
    result = cli("service", "install", "--root", str(root), "--no-user", "--dry-run", "--binary", MISSING_BINARY)
    assert result.code == 0, result.stderr
    assert tree(tmp_path) == before
    lines = result.stdout.splitlines()
    steps = [line.split()[:2] for line in lines if line.startswith("  ")]
    assert steps == [["move", "home"], ["protect", f"{root / STATE}:"], ["write", "unit"]]
    assert f"ExecStart={MISSING_BINARY} --home /var/lib/automaton run" in result.stdout
    assert (f"Before a real install: {MISSING_BINARY} is not an executable file; put the one-file binary there: "
            f"sudo install -m 0755 <binary> {MISSING_BINARY}") in lines
    assert "systemctl daemon-reload && systemctl enable --now automaton-min" in result.stdout


def test_dry_run_on_the_system_names_a_hidden_binary_as_needing_a_move(cli, set_up):
    if Path("/", UNIT).exists() or (Path("/", STATE).is_dir() and any(Path("/", STATE).iterdir())):
        pytest.skip("automaton-min is installed on this system: the dry run stops at that")
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="automaton-min-") as hidden:
        os.chmod(hidden.name, 0o755)  # on the real system: a binary the unit's PrivateTmp= hides
        result = cli("service", "install", "--dry-run", "--no-user", "--binary", hidden.name)
    assert result.code == 0, result.stderr
    need = next(line for line in result.stdout.splitlines() if line.startswith("Before a real install: "))
    assert f"the service cannot see {hidden.name}" in need
    assert "sudo install -m 0755 <binary> /usr/local/bin/automaton-min" in need
    assert f"ExecStart={hidden.name} --home" in result.stdout
    assert set_up.root.exists()


def _one_line_error(result, *fragments: str) -> None:
    assert result.code == 2, (result.stdout, result.stderr)
    assert len(result.stderr_lines) == 1 and result.stderr.startswith("Error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_errors_are_one_line_with_the_fix(cli, set_up, root, tmp_path):
    args = ("service", "install", "--root", str(root), "--no-user")
    _one_line_error(cli("--home", str(tmp_path / "none"), *args), "no automaton home at", "automaton-min --home",
                    "setup")
    (tmp_path / "bare").mkdir()
    _one_line_error(cli("--home", str(tmp_path / "bare"), *args), "is not set up", "setup")

    (root / STATE).mkdir(parents=True)
    (root / STATE / "wallet.json").write_text("{}")
    _one_line_error(cli(*args), "is not empty", "move it aside")
    (root / STATE / "wallet.json").unlink()

    with open(set_up.root / "run.lock", "w") as lock:  # an agent running on the home
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write("4242\n")
        lock.flush()
        _one_line_error(cli(*args), "is running on", "pid 4242", "stop it first")

    _one_line_error(cli(*args, "--binary", MISSING_BINARY), f"{MISSING_BINARY} is not an executable file",
                    f"sudo install -m 0755 <binary> {MISSING_BINARY}")
    _one_line_error(cli(*args, "--binary", "automaton-min"), "not a plain absolute path")
    _one_line_error(cli(*args, "--dry-run", "--binary", "automaton-min"), "not a plain absolute path")

    (root / UNIT).parent.mkdir(parents=True)
    (root / UNIT).write_text("[Service]\n")
    _one_line_error(cli(*args), "exists already", "service uninstall")
    assert set_up.root.exists() and not any((root / STATE).iterdir())  # nothing moved by any of them


def test_install_and_uninstall_need_root(set_up, monkeypatch):
    from automaton_min.cli.main import cli as group

    monkeypatch.setattr(install, "is_root", lambda: False)
    for args, command in ((["service", "install"], "sudo automaton-min service install"),
                          (["service", "uninstall"], "sudo automaton-min service uninstall")):
        result = CliRunner().invoke(group, args)
        assert result.exit_code == 2
        assert "needs root" in result.output and command in result.output
        assert len(result.output.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="sudo's user counts only for root")
def test_under_sudo_the_default_home_is_the_sudo_users(cli, root, monkeypatch):
    import pwd

    monkeypatch.delenv("AUTOMATON_HOME")
    user = pwd.getpwuid(65534)  # nobody: a user that has no automaton
    result = cli("service", "install", "--root", str(root), "--no-user", env={"SUDO_USER": user.pw_name})
    _one_line_error(result, f"no automaton home at {Path(user.pw_dir) / '.automaton'}")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="creating a user needs root and useradd")
def test_install_as_root_creates_the_user_in_the_root(cli, set_up, root):
    etc = root / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\n")
    host_passwd = Path("/etc/passwd").read_bytes()

    result = cli("service", "install", "--root", str(root))
    assert result.code == 0, result.stderr
    assert "create user" in result.stdout
    assert Path("/etc/passwd").read_bytes() == host_passwd
    entry = next(line.split(":") for line in (etc / "passwd").read_text().splitlines() if line.startswith("automaton:"))
    assert entry[5] == "/var/lib/automaton" and entry[6].endswith(("nologin", "false"))
    uid, gid = int(entry[2]), int(entry[3])
    assert uid < 1000  # a system user
    state = root / STATE
    for path in (state, *state.rglob("*")):
        assert (path.lstat().st_uid, path.lstat().st_gid) == (uid, gid), path
    assert mode(state / "wallet.json") == 0o600

    (root / UNIT).unlink()  # installing again over the same user and home: the user is kept as it is
    again = cli("--home", str(state), "service", "install", "--root", str(root))
    assert again.code == 0, again.stderr
    assert "the user automaton exists" in again.stdout and "nothing to move" in again.stdout
    assert [line.split(":")[0] for line in (etc / "passwd").read_text().splitlines()] == ["root", "automaton"]


def test_uninstall_removes_the_unit_and_its_links_and_keeps_the_state(cli, set_up, root):
    assert cli("service", "install", "--root", str(root), "--no-user").code == 0
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir()
    (wants / "automaton-min.service").symlink_to("/etc/systemd/system/automaton-min.service")  # enabled
    state = tree(root / STATE)

    result = cli("service", "uninstall", "--root", str(root))
    assert result.code == 0, result.stderr
    assert not (root / UNIT).exists() and not (wants / "automaton-min.service").is_symlink()
    assert tree(root / STATE) == state
    assert "systemctl stop automaton-min && systemctl daemon-reload" in result.stdout
    assert "Kept: the state directory /var/lib/automaton" in result.stdout

    _one_line_error(cli("service", "uninstall", "--root", str(root)), "not installed")


# ------------------------------------------------------------------------------------------ the unit itself

needs_analyze = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
OK_OR_BETTER = {"OK", "SAFE", "PERFECT"}  # systemd's levels: PERFECT 0, SAFE < 1, OK < 5, then MEDIUM, EXPOSED, ...


@needs_analyze
def test_systemd_analyze_verify_passes(tmp_path):
    # verify checks that ExecStart's binary exists: the unit as install writes it, with an executable that does
    unit = tmp_path / "automaton-min.service"
    unit.write_text(expected_unit(sys.executable))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), result.stderr


@needs_analyze
def test_systemd_analyze_security_rates_the_unit_ok_or_better():
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(CHECKED_IN_UNIT)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    overall = re.search(r"Overall exposure level for automaton-min\.service: (\d+\.\d) (\w+)", result.stdout)
    assert overall, result.stdout
    exposure, level = float(overall.group(1)), overall.group(2)
    print(f"exposure {exposure} {level}")
    assert exposure < 5.0 and level in OK_OR_BETTER
    assert f"rates it {exposure} {level}" in CHECKED_IN_UNIT.read_text()  # the figure the unit's header quotes
    readme = (REPO / "README.md").read_text()
    assert f"{exposure} {level}" in readme


# ------------------------------------------------------------------------------------------ confinement under it

# unshare and mount numbers, and the audit arch, per machine (seccomp filters match raw numbers)
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 272, 165), "aarch64": (0xC00000B7, 97, 40)}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 38, 22, 2, 65, 1

# Run as a wrapper: refuse unshare with any of the given flags, and mount where asked, with EPERM (as
# RestrictNamespaces= and a filter without @mount do), refuse writable+executable memory (PR_SET_MDWE, the kernel's
# form of MemoryDenyWriteExecute=), then exec argv.
_WRAPPER = f"""
import ctypes, os, struct, sys
arch, unshare, mount = {{arch}}
refused_flags, refuse_mount = {{rule}}
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl({PR_SET_MDWE}, {PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) != 0:
    sys.exit(77)
def op(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)
EPERM, ALLOW = 0x00050000 | 1, 0x7FFF0000
program = b"".join([
    op(0x20, 0, 0, 4), op(0x15, 0, 7, arch),  # another arch: allow
    op(0x20, 0, 0, 0), op(0x15, 0, 1, mount), op(0x06, 0, 0, EPERM if refuse_mount else ALLOW),
    op(0x15, 0, 3, unshare), op(0x20, 0, 0, 16), op(0x45, 0, 1, refused_flags), op(0x06, 0, 0, EPERM),
    op(0x06, 0, 0, ALLOW)])
buffer = ctypes.create_string_buffer(program, len(program))
fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
fbuffer = ctypes.create_string_buffer(fprog, len(fprog))
assert libc.prctl({PR_SET_NO_NEW_PRIVS}, 1, 0, 0, 0) == 0
assert libc.prctl({PR_SET_SECCOMP}, {SECCOMP_MODE_FILTER}, ctypes.c_void_p(ctypes.addressof(fbuffer)), 0, 0) == 0, \
    os.strerror(ctypes.get_errno())
os.execv(sys.argv[1], sys.argv[1:])
"""
UNIT_RULE = (0x6E000080, False)  # RestrictNamespaces=user mnt: cgroup, uts, ipc, pid, net and time refused; @mount
PREVIOUS_RULE = (0xFFFFFFFF, True)  # RestrictNamespaces=yes, no @mount


def _doctor_under(rule: tuple[int, bool], tmp_path: Path) -> subprocess.CompletedProcess:
    """``doctor`` under the wrapper with the unit's ``rule``; skipped where W+X memory cannot be refused."""
    wrapper = tmp_path / "unit_like.py"
    arch = repr(_SECCOMP_ARCH[platform.machine()])
    wrapper.write_text(_WRAPPER.replace("{arch}", arch).replace("{rule}", repr(rule)))
    probe = subprocess.run([sys.executable, str(wrapper), sys.executable, "-c",
                            "import mmap; mmap.mmap(-1, 4096, prot=7)"], capture_output=True, text=True, timeout=60)
    if probe.returncode == 77:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3)")
    assert probe.returncode != 0 and "PermissionError" in probe.stderr  # W+X memory is refused under the wrapper
    return subprocess.run([sys.executable, str(wrapper), sys.executable, "-m", "automaton_min", "doctor"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))


def _line(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line[6:].startswith(name + " "))


needs_seccomp_table = pytest.mark.skipif(platform.machine() not in _SECCOMP_ARCH or sys.maxsize < 2**32,
                                         reason="no seccomp table here")


@needs_seccomp_table
def test_under_the_unit_commands_get_landlock_and_read_only_mounts_with_memory_deny_write_execute(set_up, tmp_path):
    from automaton_min.confine.landlock import abi_version

    if abi_version() < 1:
        pytest.skip("this kernel has no Landlock: under the unit, local commands would be refused")
    result = _doctor_under(UNIT_RULE, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    line = _line(result.stdout, "confinement")
    assert f"landlock (ABI {abi_version()}" in line and "home hidden, read-only outside the workspace" in line
    assert "wallet.json unreachable from a command" in line
    assert "changed nothing" in _line(result.stdout, "host files")


@needs_seccomp_table
def test_under_the_previous_units_rule_doctor_says_files_outside_are_not_protected(set_up, tmp_path):
    """No namespace at all (RestrictNamespaces=yes, no @mount): Landlock alone, and doctor fails naming the fix."""
    from automaton_min.confine.landlock import abi_version

    if abi_version() < 1:
        pytest.skip("this kernel has no Landlock: local commands would be refused")
    result = _doctor_under(PREVIOUS_RULE, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    confinement = _line(result.stdout, "confinement")
    assert confinement.startswith("ok") and "home hidden" not in confinement
    host = _line(result.stdout, "host files")
    assert host.startswith("FAIL") and "NOT read-only to commands: no mount namespace here" in host
    assert "RestrictNamespaces=user mnt" in result.stdout


def test_the_one_file_binary_is_told_from_a_script_by_its_head(tmp_path: Path) -> None:
    """The one-file binary is a sh head naming its archive, then the archive: copied by service install; a
    source install's entry point (a Python script) or any other file is not."""
    from automaton_min.update.baked import one_file_id

    head = "#!/bin/sh\n# automaton-min: one self-contained executable.\nID=" + "ab" * 32 + "\nHEAD=4096\n"
    binary, script, elf = tmp_path / "automaton-min", tmp_path / "entry", tmp_path / "elf"
    binary.write_bytes(head.encode() + b"#" * 100 + b"\n\n\x1f\x8b rest")
    script.write_text("#!/usr/bin/python3\nID=" + "ab" * 32 + "\nimport sys\n")
    elf.write_bytes(b"\x7fELF" + bytes(200))
    assert one_file_id(binary) == "ab" * 32 and install.is_one_file_binary(str(binary))
    assert not any(install.is_one_file_binary(str(path)) for path in (script, elf, tmp_path / "missing"))
