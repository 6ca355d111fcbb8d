"""Kernel confinement of local commands: the plan, the spawner under Landlock and under the namespace fallback,
the refusal where neither works, and the key scrubber behind them."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from automaton_min.agent.key_guard import REDACTED, KeyGuard
from automaton_min.confine import client as confine_client
from automaton_min.confine.client import ConfinedSandbox, ConfinementUnavailable, RefusingSandbox, UnconfinedSandbox, local_sandbox
from automaton_min.confine.landlock import abi_version
from automaton_min.confine.plan import DEVICES, make_plan
from automaton_min.confine.protected import HOME_PROTECTED
from automaton_min.errors import RuntimeFailure
from attacks.theft_corpus import ATTACKS, DAEMON

needs_landlock = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock (needs Linux >= 5.13 with landlock enabled)")


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    """The production layout: secrets in the home, the workspace inside it."""
    home = tmp_path / "automaton-home"
    (home / "workspace").mkdir(parents=True)
    (home / "wallet.json").write_text('{"privateKey": "0x' + "ab" * 32 + '"}')
    (home / "automaton.json").write_text('{"openaiApiKey": "sk-secret-canary"}')
    return home


def start(home: Path, method: str) -> ConfinedSandbox:
    try:
        return ConfinedSandbox(home, home / "workspace", method).start()
    except ConfinementUnavailable as exc:
        if method == "namespace":
            pytest.skip(f"unprivileged user namespaces are not available here: {exc}")
        raise


@pytest.fixture(params=[pytest.param("landlock", marks=needs_landlock), "namespace"])
def confined(request, agent_home: Path):
    sandbox = start(agent_home, request.param)
    yield sandbox
    sandbox.close()


# --------------------------------------------------------------------------- the plan


def test_the_plan_never_grants_the_home_or_anything_holding_it(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".automaton"
    (home / "bin").mkdir(parents=True)
    plan = make_plan(home, home / "workspace", tmp_path / "t", path_env=f"{home / 'bin'}:{tmp_path}:/usr/bin")
    assert Path(os.path.realpath(home / "bin")) in plan.dropped and Path(os.path.realpath(tmp_path)) in plan.dropped
    for granted in plan.read_only:
        assert not (granted == plan.home or granted in plan.home.parents or plan.home in granted.parents)
    assert Path("/usr") in plan.read_only


@pytest.mark.parametrize("name", ["", *HOME_PROTECTED])
def test_the_plan_refuses_a_workspace_over_a_protected_entry(tmp_path: Path, name: str) -> None:
    """The one list (confine/protected.py, which the path rules read too): no writable tree may hold an entry."""
    home = tmp_path / ".automaton"
    with pytest.raises(ValueError, match="never touch"):
        make_plan(home, home / name, tmp_path / "t")
    with pytest.raises(ValueError, match="never touch"):
        make_plan(home, tmp_path / "ws", home / name)


# --------------------------------------------------------------------------- both methods


def test_commands_work_in_the_workspace_and_the_private_temp_dir(confined: ConfinedSandbox) -> None:
    result = confined.exec('echo made > note.txt && cat note.txt && echo t > "$TMPDIR/t" && cat "$TMPDIR/t" && python3 -c "print(6*7)"', 20)
    assert (result.exit_code, result.stdout.split()) == (0, ["made", "t", "42"]), result.stderr
    assert (confined.workspace / "note.txt").read_text() == "made\n"
    confined.write_file("sub/plan.md", "1. earn\n")
    assert confined.read_file("sub/plan.md") == "1. earn\n"


@pytest.mark.parametrize("command", [a for a in ATTACKS if not a.startswith(DAEMON)])  # those need the real daemon
def test_the_home_is_out_of_reach(confined: ConfinedSandbox, agent_home: Path, command: str) -> None:
    before = {p: p.read_bytes() for p in agent_home.iterdir() if p.is_file()}
    result = confined.exec(command.replace("{home}", str(agent_home)), 20)
    seen = result.stdout + result.stderr
    wallet = before[agent_home / "wallet.json"]
    assert "ab" * 16 not in seen and "sk-secret-canary" not in seen and base64.b64encode(wallet).decode()[:24] not in seen
    assert {p: p.read_bytes() for p in agent_home.iterdir() if p.is_file()} == before


def test_no_entry_of_the_one_list_is_reachable(confined: ConfinedSandbox, agent_home: Path) -> None:
    """Every protected entry (confine/protected.py, the list the path rules read too), from a command and a file
    operation: not read, not written."""
    for name in HOME_PROTECTED:
        entry = agent_home / name
        if name == "skills":
            (entry / "s").mkdir(parents=True, exist_ok=True)
            entry = entry / "s" / "SKILL.md"
        elif name == "bin":  # the service's own binary (README: Updates)
            entry.mkdir(exist_ok=True)
            entry = entry / "automaton-min"
        entry.write_text(f"canary-{name}")
        result = confined.exec(f"cat {entry}; echo x >> {entry}; rm -f {entry}", 20)
        assert f"canary-{name}" not in result.stdout and entry.read_text() == f"canary-{name}", name
        with pytest.raises(OSError):
            confined.read_file(str(entry))
        with pytest.raises(OSError):
            confined.write_file(str(entry), "x")
        assert entry.read_text() == f"canary-{name}", name


def test_file_operations_are_confined_too(confined: ConfinedSandbox, agent_home: Path) -> None:
    with pytest.raises(OSError):
        confined.read_file(str(agent_home / "wallet.json"))
    with pytest.raises(OSError):  # Landlock refuses; under the namespace the cover over the home is read-only
        confined.write_file(str(agent_home / "automaton.json"), "{}")
    assert "sk-secret-canary" in (agent_home / "automaton.json").read_text()


def test_read_file_takes_regular_files_only(confined: ConfinedSandbox) -> None:
    """A FIFO would block the spawner and /dev/zero would fill its memory: both are refused at once."""
    os.mkfifo(confined.workspace / "pipe")
    for path in ("pipe", "/dev/zero"):
        with pytest.raises(OSError, match="not a regular file"):
            confined.read_file(path)


def test_the_daemons_environment_is_out_of_reach(confined: ConfinedSandbox) -> None:
    """``/proc/<daemon>/environ``: this test process plays the daemon; its environment block is read whole."""
    result = confined.exec(f"cat /proc/{os.getpid()}/environ", 20)
    assert result.exit_code != 0 and result.stdout == ""


def test_a_spawner_that_died_is_replaced_confined_the_same_way(confined: ConfinedSandbox, agent_home: Path) -> None:
    first = confined.spawner_pid
    os.kill(first, signal.SIGKILL)
    confined._proc.wait(timeout=10)  # dead between two requests (one that dies mid-request is an error, not rerun)
    result = confined.exec("cat ../wallet.json; echo still-here", 20)
    assert confined.spawner_pid != first and result.stdout.strip() == "still-here"


def test_ctrl_c_at_the_terminal_reaches_the_daemon_not_the_spawner(confined: ConfinedSandbox) -> None:
    """The spawner leads its own session, so a terminal's SIGINT to the foreground group cannot end a command the
    daemon is letting finish."""
    assert os.getsid(confined.spawner_pid) == confined.spawner_pid != os.getsid(0)


# --------------------------------------------------------------------------- Landlock only


@needs_landlock
def test_landlock_reports_its_abi_and_scopes_signals_and_sockets(agent_home: Path) -> None:
    sandbox = start(agent_home, "landlock")
    try:
        assert sandbox.describe().startswith(f"landlock (ABI {abi_version()}")
        own = sandbox.exec(f"kill -0 {os.getpid()} && echo signalled", 20)
        if abi_version() >= 6:
            assert "signalled" not in own.stdout and own.exit_code != 0
        outside = sandbox.exec("echo x > /tmp/automaton-confine-probe", 20)
        assert outside.exit_code != 0 and not Path("/tmp/automaton-confine-probe").exists()
        if abi_version() >= 6:  # an abstract UNIX socket of the daemon's cannot be reached from inside
            import socket
            name = f"\0automaton-test-{os.getpid()}"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(name)
            listener.listen(1)
            try:
                probe = sandbox.exec("python3 -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); "
                                     "s.connect(sys.argv[1].replace('@', chr(0))); print('connected')\" "
                                     + name.replace("\0", "@"), 20)
            finally:
                listener.close()
            # refused by the seccomp filter (no AF_UNIX socket at all), or else by Landlock's scope
            assert "connected" not in probe.stdout and ("PermissionError" in probe.stderr or "Errno 97" in probe.stderr)
        hard = sandbox.exec("ln ../wallet.json hard", 20)
        assert hard.exit_code != 0 and not (agent_home / "workspace" / "hard").exists()
    finally:
        sandbox.close()


@needs_landlock
def test_commands_run_without_capabilities(agent_home: Path) -> None:
    sandbox = start(agent_home, "landlock")
    try:
        status = sandbox.exec("grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status", 20).stdout.split()
        assert status == ["CapPrm:", "0" * 16, "CapEff:", "0" * 16, "CapBnd:", "0" * 16]
    finally:
        sandbox.close()


def test_namespace_hides_the_home_and_leaves_only_the_workspace_writable(agent_home: Path, tmp_path: Path) -> None:
    sandbox = start(agent_home, "namespace")
    try:
        listing = sandbox.exec(f"ls -a {agent_home}", 20)
        assert listing.stdout.split() == [".", "..", "workspace"]
        for outside in (tmp_path / "planted", Path(sys.prefix) / "planted.pth"):
            attempt = sandbox.exec(f"touch {outside}", 20)
            assert attempt.exit_code != 0 and "Read-only file system" in attempt.stderr and not outside.exists()
        assert sandbox.exec('touch inside "$TMPDIR/t" && echo ok', 20).stdout == "ok\n"
    finally:
        sandbox.close()


def test_without_landlock_dev_holds_only_the_plans_devices(agent_home: Path) -> None:
    """Nothing else keeps a command run as root from the disks there: /dev is a tmpfs with the plan's devices."""
    sandbox = start(agent_home, "namespace")
    try:
        listing = sandbox.exec("ls -A /dev && echo x > /dev/null && head -c 4 /dev/zero | wc -c", 20)
        devices = {Path(d).name for d in DEVICES if os.path.exists(d)}
        assert listing.stdout.split() == sorted(devices | {"fd", "stdin", "stdout", "stderr"}) + ["4"], listing
    finally:
        sandbox.close()


def test_a_spawner_launched_early_is_the_one_the_local_sandbox_waits_for(agent_home: Path) -> None:
    launched = confine_client.launch(agent_home, agent_home / "workspace", {"execConfinement": "namespace"})
    pid = launched.spawner_pid  # started: the daemon goes on building the agent meanwhile
    try:
        sandbox = local_sandbox(agent_home, agent_home / "workspace", {"execConfinement": "namespace"},
                                launched=launched)
    except ConfinementUnavailable as exc:
        pytest.skip(f"unprivileged user namespaces are not available here: {exc}")
    try:
        assert sandbox is launched and sandbox.spawner_pid == pid and sandbox.exec("echo hi", 20).stdout == "hi\n"
    finally:
        sandbox.close()


FAILED_START = """
import json, os, sys
from pathlib import Path
from automaton_min.config import load_config
from automaton_min.errors import RuntimeFailure
from automaton_min.home import Home
from automaton_min.runtime import agent_runtime, sandboxes, service

launched = []
real = sandboxes.launch_spawner
sandboxes.launch_spawner = lambda *args, **kwargs: launched.append(real(*args, **kwargs)) or launched[0]
def fail(*args, **kwargs):
    raise RuntimeFailure("the database cannot be opened")
agent_runtime.build_agent = fail
home = Home(Path(os.environ["AUTOMATON_HOME"]))
try:
    service.run_service(home, load_config(home))
except RuntimeFailure:
    pass
spawner = launched[0]
print(json.dumps({"ended": spawner._proc.poll() is not None, "temp_dir_left": spawner._tmp is not None}))
"""


def test_a_start_that_fails_after_the_spawner_was_launched_stops_it(set_up) -> None:
    out = subprocess.run([sys.executable, "-c", FAILED_START], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ended": True, "temp_dir_left": False}


# --------------------------------------------------------------------------- where nothing works


def test_without_any_confinement_local_commands_are_refused(agent_home: Path, monkeypatch) -> None:
    def unavailable(self):
        raise ConfinementUnavailable(f"{self.method} confinement failed: not on this kernel")

    monkeypatch.setattr(ConfinedSandbox, "start", unavailable)
    refused = local_sandbox(agent_home, agent_home / "workspace", {})
    assert isinstance(refused, RefusingSandbox) and refused.describe() == "none: local commands refused"
    with pytest.raises(RuntimeFailure, match="unconfinedExec"):
        refused.exec("echo hi")
    allowed = local_sandbox(agent_home, agent_home / "workspace", {"unconfinedExec": True})
    assert isinstance(allowed, UnconfinedSandbox) and allowed.exec("echo hi").stdout == "hi\n"
    in_conway = local_sandbox(agent_home, agent_home / "workspace", {}, disposable=True)  # never refuse them all there
    assert isinstance(in_conway, UnconfinedSandbox) and in_conway.exec("echo hi").stdout == "hi\n"
    assert "Conway sandbox" in in_conway.describe()


def test_auto_falls_back_to_the_namespace_when_landlock_fails(agent_home: Path, monkeypatch) -> None:
    real_start = ConfinedSandbox.start

    def no_landlock(self):
        if self.method == "landlock":
            raise ConfinementUnavailable("landlock confinement failed: this kernel has no Landlock")
        return real_start(self)

    monkeypatch.setattr(ConfinedSandbox, "start", no_landlock)
    sandbox = local_sandbox(agent_home, agent_home / "workspace", {})
    try:
        if isinstance(sandbox, RefusingSandbox):
            pytest.skip("unprivileged user namespaces are not available here")
        assert sandbox.describe() == "namespace (home hidden, read-only outside the workspace, no unix sockets)"
    finally:
        sandbox.close()


@needs_landlock
def test_doctor_starts_the_confinement_and_reports_each_protection(cli, set_up) -> None:
    result = cli("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["confinement"]["ok"] and checks["confinement"]["detail"].startswith("landlock (ABI")
    assert "wallet.json unreachable" in checks["confinement"]["detail"]
    assert checks["host files"]["ok"] and "changed nothing" in checks["host files"]["detail"], checks["host files"]
    assert checks["unix sockets"]["ok"] and "seccomp" in checks["unix sockets"]["detail"], checks["unix sockets"]
    assert checks["processes"]["ok"] and "ends with its call" in checks["processes"]["detail"]
    assert checks["limits"]["ok"] and "OOM killer's first choice" in checks["limits"]["detail"]
    assert checks["disk reserve"]["ok"] and "MB free" in checks["disk reserve"]["detail"]


def test_doctor_says_what_the_kernel_lacks(agent_home: Path, monkeypatch) -> None:
    from automaton_min.confine.self_test import self_test

    monkeypatch.setattr(ConfinedSandbox, "start", _start_without_seccomp)
    probes = {p.name: p for p in self_test(agent_home, agent_home / "workspace", {})}
    assert not probes["unix sockets"].ok and "no seccomp" in probes["unix sockets"].detail
    assert "CONFIG_SECCOMP_FILTER" in probes["unix sockets"].fix


def _start_without_seccomp(self):
    """The spawner as on a kernel without seccomp filters: it reports the filter missing (a fresh process cannot be
    monkeypatched, so the report is changed on the way back)."""
    started = _real_start(self)
    self.report["unix_sockets"] = "not available: no seccomp here"
    return started


_real_start = ConfinedSandbox.start


def test_an_unconfined_agent_fails_the_self_test(agent_home: Path, monkeypatch) -> None:
    from automaton_min.confine.self_test import self_test

    monkeypatch.setattr(ConfinedSandbox, "start", lambda self: (_ for _ in ()).throw(ConfinementUnavailable("off")))
    [probe] = self_test(agent_home, agent_home / "workspace", {"unconfinedExec": True})
    assert not probe.ok and "wallet.json is READABLE" in probe.detail
    [probe] = self_test(agent_home, agent_home / "workspace", {})
    assert not probe.ok and probe.detail.startswith("local commands would be refused")


def test_the_spawner_gets_a_bare_environment(monkeypatch) -> None:
    monkeypatch.setenv("CONWAY_API_KEY", "cnwy_k_secret")
    monkeypatch.setenv("_PYI_APPLICATION_HOME_DIR", "/tmp/_MEIabc")
    env = confine_client.spawner_env()
    assert "CONWAY_API_KEY" not in env and env["_PYI_APPLICATION_HOME_DIR"] == "/tmp/_MEIabc"


# --------------------------------------------------------------------------- the scrubber behind it


def guard_and_key() -> tuple[KeyGuard, bytes, bytes]:
    key = bytes(range(1, 33))
    wallet = json.dumps({"chainType": "evm", "privateKey": "0x" + key.hex(), "createdAt": "2026-11-22T10:15:30.250Z"}).encode()
    return KeyGuard(key, wallet), key, wallet


@pytest.mark.parametrize("disguise", [
    lambda k, w: "0x" + k.hex(),
    lambda k, w: k.hex().upper(),
    lambda k, w: " ".join("0x" + k.hex()),
    lambda k, w: ":".join(f"{b:02x}" for b in k),
    lambda k, w: "\n".join(k.hex()[i:i + 8] for i in range(0, 64, 8)),
    lambda k, w: k.hex()[::-1],
    lambda k, w: k.hex()[10:40],
    lambda k, w: base64.b64encode(k).decode(),
    lambda k, w: base64.b64encode(w).decode(),
    lambda k, w: base64.b64encode(b"tar-header" + w).decode(),
    lambda k, w: "\n".join(base64.b64encode(w).decode()[i:i + 76] for i in range(0, 400, 76)),
    lambda k, w: base64.urlsafe_b64encode(w).decode(),
    lambda k, w: base64.b64encode(w).decode()[::-1],
    lambda k, w: base64.b32encode(w).decode(),
    lambda k, w: base64.b32encode(b"xy" + w).decode().lower(),
    lambda k, w: w.hex(),
    lambda k, w: " ".join(f"{b:02x}" for b in w),
    lambda k, w: base64.b32encode(k).decode(),
])
def test_key_material_is_redacted_in_any_disguise(disguise) -> None:
    guard, key, wallet = guard_and_key()
    text = "exit_code: 0\nstdout:\n" + disguise(key, wallet) + "\nstderr: (empty)"
    scrubbed = guard.scrub(text)
    assert REDACTED in scrubbed and key.hex() not in scrubbed.lower() and scrubbed.startswith("exit_code: 0")


API_KEY = "sk-ant-api03-Zq8xW2vN5mK7pR4tY1uI3oE6aS9dF0gH"


@pytest.mark.parametrize("disguise", [
    lambda a: a, lambda a: a[5:30], lambda a: a.encode().hex(), lambda a: a.encode().hex().upper(),
    lambda a: base64.b64encode(a.encode()).decode(), lambda a: base64.b64encode(b"k=" + a.encode()).decode(),
    lambda a: base64.b32encode(a.encode()).decode(), lambda a: base64.b32encode(b"key:" + a.encode()).decode().lower(),
    lambda a: a[::-1], lambda a: base64.b64encode(a.encode()).decode()[::-1],
])
def test_api_keys_are_redacted_in_the_same_disguises(disguise) -> None:
    guard = KeyGuard(bytes(range(1, 33)), b"", [API_KEY])
    scrubbed = guard.scrub("stdout:\n" + disguise(API_KEY) + "\n")
    assert REDACTED in scrubbed and API_KEY[13:29] not in scrubbed


def test_ordinary_output_passes_untouched() -> None:
    guard, _, _ = guard_and_key()
    text = "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\n" + base64.b64encode(os.urandom(300)).decode()
    assert guard.scrub(text) is text


def test_redact_cleans_every_string_of_a_tool_calls_arguments_and_keeps_clean_ones_as_they_are() -> None:
    guard, key, _ = guard_and_key()
    arguments = {"url": "https://x.example/k?v=" + key.hex(), "headers": {"X-" + key.hex()[:20]: "1"},
                 "list": ["fine", base64.b64encode(key).decode()], "n": 3}
    cleaned = guard.redact(arguments)
    assert key.hex()[:16] not in json.dumps(cleaned).lower() and cleaned["n"] == 3 and cleaned["list"][0] == "fine"
    assert REDACTED in cleaned["url"] and all(REDACTED in k for k in cleaned["headers"])
    clean = {"path": "notes.md", "content": ["a", {"b": "c"}]}
    assert guard.redact(clean) is clean and guard.redact(None) is None


def test_cancel_ends_the_command_under_way_and_the_spawner_serves_on(confined: ConfinedSandbox) -> None:
    """What a stopping agent does after its grace period: the running command's whole group ends at once."""
    import errno
    import threading

    fifo = confined.workspace / "began"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(confined.exec("echo started > began; sleep 60 & wait", 120))
        except OSError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    with open(fifo, encoding="ascii") as began:  # returns once the command has written: it is running
        assert began.read().strip() == "started"
    confined.cancel()
    worker.join(20)
    assert not worker.is_alive()
    assert isinstance(outcome[0], OSError) and outcome[0].errno == errno.ECANCELED
    assert confined.exec("echo next", 20).stdout == "next\n"


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_a_background_job_outlives_its_call_until_stopped_and_never_the_spawner(agent_home: Path) -> None:
    sandbox = start(agent_home, "landlock" if abi_version() else "namespace")
    try:
        job = sandbox.start_job("sleep 300 & echo $! > child.pid; echo started; wait")
        assert sandbox.exec("echo next", 20).stdout == "next\n"  # a call ends: the job is spared
        child = int((agent_home / "workspace" / "child.pid").read_text())
        assert _running(job["pid"]) and _running(child)
        assert [j["id"] for j in sandbox.jobs() if j["running"]] == [job["id"]]
        assert (agent_home / "workspace" / job["log"]).read_text() == "started\n"
        cat = sandbox.exec(f"cat ../wallet.json; kill -0 {os.getpid()} && echo signalled", 20)  # still confined
        assert "privateKey" not in cat.stdout and "signalled" not in cat.stdout
        stopped = sandbox.stop_job(job["id"])
        assert not stopped["running"] and not _running(job["pid"]) and not _running(child)
        assert sandbox.jobs() == []
        with pytest.raises(FileNotFoundError):
            sandbox.stop_job(job["id"])
        last = sandbox.start_job("sleep 302")
        assert _running(last["pid"])
    finally:
        sandbox.close()
    assert not _running(last["pid"])  # every job ends with the spawner


def test_a_job_left_in_the_background_ends_with_its_call(agent_home: Path) -> None:
    """A job a command left running (in a new session too) is killed and reaped when the call ends."""
    sandbox = start(agent_home, "landlock" if abi_version() else "namespace")
    try:
        started = sandbox.exec("(sleep 300 & echo $! > job.pid); (setsid sleep 301 & echo $! > job2.pid); echo started", 20)
        assert started.stdout == "started\n"
        jobs = [int((agent_home / "workspace" / name).read_text()) for name in ("job.pid", "job2.pid")]
        for job in jobs:
            with pytest.raises(ProcessLookupError):
                os.kill(job, 0)
        assert sandbox.exec("echo next", 20).stdout == "next\n"
    finally:
        sandbox.close()


def test_the_description_says_what_the_kernel_lacks(tmp_path: Path) -> None:
    sandbox = ConfinedSandbox(tmp_path, tmp_path / "workspace", "landlock")
    sandbox.report = {"method": "landlock", "abi": 4, "scoped": False, "unix_sockets": "not available: no filter",
                      "read_only": None, "not_read_only": "unshare(user, mount): Operation not permitted"}
    assert sandbox.describe() == ("landlock (ABI 4, signals NOT scoped (Landlock ABI < 6: commands can signal the "
                                  "user's processes), modes and times outside the workspace NOT protected)")
    assert sandbox.host_files() == ("NOT read-only to commands: no mount namespace here (unshare(user, mount): "
                                    "Operation not permitted)")
    sandbox.report = {"method": "landlock", "abi": 4, "scoped": False, "unix_sockets": "refused",
                      "home_hidden": True, "read_only": "mount namespace"}
    assert sandbox.describe() == ("landlock (ABI 4, signals kept only from the agent's own processes (Landlock ABI < 6)"
                                  ", home hidden, read-only outside the workspace, no unix sockets)")
    assert sandbox.host_files() == ("read-only to commands outside the workspace and temp dir (a mount namespace: "
                                    "root, no user one)")
    sandbox.report = {"method": "landlock", "abi": 7, "scoped": True, "unix_sockets": "refused", "oom_first": True,
                      "home_hidden": True, "read_only": "user namespace", "read_only_refused": ["/mnt/odd"]}
    assert sandbox.describe() == ("landlock (ABI 7, signals and abstract sockets scoped, home hidden, "
                                  "read-only outside the workspace, no unix sockets)")
    assert sandbox.host_files() == ("read-only to commands outside the workspace and temp dir (a user + mount "
                                    "namespace); but /mnt/odd stayed WRITABLE")


def test_an_ended_job_is_no_longer_spared(tmp_path: Path) -> None:
    """Once a job's shell has ended its pid may be reused: the pid must leave the spared list, even before the
    ended shell is reaped (a pidfd tells)."""
    import select

    from automaton_min.confine.jobs import Jobs

    jobs = Jobs(tmp_path)
    kept = jobs.start("exec sleep 30", {"PATH": os.defpath}, None)
    done = jobs.start("exit 0", {"PATH": os.defpath}, None)
    try:
        _, _, pidfd = jobs._running[done.id]
        assert select.select([pidfd], [], [], 10)[0]  # ended (not yet reaped: no one has waited for it)
        assert jobs.pids() == [kept.pid]
    finally:
        jobs.stop(kept.id)
    assert jobs.pids() == []


def test_a_command_cannot_lock_the_tools_out_of_the_workspace(agent_home: Path) -> None:
    sandbox = start(agent_home, "landlock" if abi_version() else "namespace")
    try:
        sandbox.exec("chmod 0 .", 20)
        assert sandbox.exec("echo still", 20).stdout == "still\n"
        sandbox.write_file("after.txt", "fine")
        assert sandbox.read_file("after.txt") == "fine"
    finally:
        sandbox.close()


def test_a_dead_agents_temp_dir_is_removed_at_the_next_start(agent_home: Path, tmp_path: Path, monkeypatch) -> None:
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    dead = _a_dead_pid()
    stale = tmp_path / "tmp" / f"automaton-exec-{dead}-abc123"
    (stale / "deep").mkdir(parents=True)
    alive_one = tmp_path / "tmp" / f"automaton-exec-{os.getpid()}-def456"  # a running agent's: kept
    alive_one.mkdir()
    sandbox = start(agent_home, "landlock" if abi_version() else "namespace")
    try:
        assert not stale.exists() and alive_one.exists()
    finally:
        sandbox.close()


def _a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_workspace_holding_the_programs_own_files_is_refused(tmp_path: Path) -> None:
    """A command able to write the code the daemon runs (the package, its virtualenv, a binary's unpacked bundle)
    could change what the agent runs next, outside any confinement: such a workspace is refused with the fix."""
    from automaton_min.confine.plan import own_program_paths
    from automaton_min.errors import UserError

    program = own_program_paths()[0]
    with pytest.raises(UserError, match="runs from .* inside it"):
        make_plan(tmp_path / "home", program.parent, tmp_path / "tmp")
    make_plan(tmp_path / "home", tmp_path / "workspace", tmp_path / "tmp")  # elsewhere: fine
