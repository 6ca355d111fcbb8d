"""A child's whole life through the real agent (README: Children): the parent's loop, on a scripted model, spawns a
child into the Conway stand-in's directory sandboxes, which installs the signed release there (the source tree
wrapped as a one-file program, or ``AUTOMATON_BINARY``), makes its own wallet, signs in for its own Conway key,
is funded exactly once, starts as a real process, talks both ways over the loopback relay, is found healthy,
killed, restarted, killed for good, found dead and pruned."""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from automaton_min.clock import system_now
from automaton_min.heartbeat.children_task import children_tasks
from automaton_min.store.children import list_children
from automaton_min.store.wake import post_wake
from automaton_min.update.baked import Build
from standins.conway_api import ConwayApi
from standins.model_servers import OpenAIServer, openai_answer
from standins.releases import TEST_PUBLIC_KEY, ReleaseServer, child_program, manifest
from standins.social_relay import SocialRelay

ARCH = f"linux-{os.uname().machine}"


def call(tool: str, **arguments) -> tuple[str, str, str]:
    return ("call_0", tool, json.dumps(arguments))


@pytest.fixture
def agent_clock():
    return system_now  # the relay's signatures are checked against the time, by the child too


@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def cloud(tmp_path):
    with ConwayApi(root=tmp_path / "cloud", balance_cents=20_000) as api:
        yield api


@pytest.fixture
def children_to_stop(cloud):
    """Each child process the test started is stopped at the end, whatever happened."""
    yield
    for sid in list(cloud.sandboxes):
        directory = cloud.directory(sid)
        lock = directory / "root" / ".automaton" if directory else None
        for pid in _run_pids(lock):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run_pids(home: Path | None) -> list[int]:
    """The processes whose working directory is inside this child's sandbox directory."""
    if home is None:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(Path(os.readlink(entry / "cwd"))).startswith(str(home.parent)):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def child_report(cloud, sandbox_id: str) -> dict:
    ran = cloud._run(sandbox_id, "./automaton-min status --json", 60_000)
    return json.loads(ran["stdout"])


def wait_for(condition, what: str, timeout_s: float = 60):
    """Poll ``condition`` until it returns something true (a real child process is starting or stopping)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def a_parent(agent_for, cloud):
    """A parent agent on the Conway stand-in and a loopback relay, with this build published as a signed release
    for its children: (the parent, the relay, the build)."""
    program, version = child_program()
    build = Build(None, TEST_PUBLIC_KEY, version, "", ARCH)
    with ReleaseServer() as releases, SocialRelay(system_now) as relay:
        releases.publish(manifest(version, {ARCH: program}, system_now()), {ARCH: program})
        yield agent_for(release=build, conwayApiUrl=cloud.url, conwayApiKey=cloud.api_key, socialRelayUrl=relay.url,
                        updateManifestUrl=releases.manifest_url), relay, build


def test_a_child_lives_its_whole_life_through_the_parent(agent_for, model, cloud, children_to_stop, cli):
    with a_parent(agent_for, cloud) as (parent, relay, build):
        parent_address = parent.wallet.address

        # spawn: one sandbox, the release installed and checked there, the child's own wallet read back
        model.script(openai_answer(None, [call("spawn_child", name="kid", genesis_prompt="Count the stars.",
                                               creator_message="Welcome.")]), openai_answer("Spawned."))
        parent.loop.run_cycle("test")
        [child] = list_children(parent.db)
        assert child.status == "wallet_verified", parent.db.query("SELECT result, error FROM tool_calls")
        [sandbox_id] = [sid for sid in cloud.sandboxes if sid != "sb-1"]
        home = cloud.directory(sandbox_id) / "root" / ".automaton"
        genesis = json.loads((home / "genesis.json").read_text())
        assert genesis["parentAddress"] == parent_address and genesis["name"] == "kid"

        # fund: the ledger moves once, to the child's own wallet
        model.script(openai_answer(None, [call("fund_child", child_id=child.id, amount_cents=700)]),
                     openai_answer("Funded."))
        parent.loop.run_cycle("test")
        assert cloud.credited == {child.address.lower(): 700}
        assert cloud.balance_cents == 20_000 - 700
        # a message each way over the relay: the parent's waits for the child, which answers it from its own wallet
        model.script(openai_answer(None, [call("message_child", child_id=child.id, content="hello kid")]),
                     openai_answer("Sent."))
        parent.loop.run_cycle("test")
        assert [m["content"] for m in relay.log if m["to"] == child.address.lower()] == ["hello kid"]
        cloud.chat_handler = lambda body: answer_as_child(body, parent_address)
        model.script(openai_answer(None, [call("start_child", child_id=child.id)]), openai_answer("Started."))
        parent.loop.run_cycle("test")
        assert list_children(parent.db)[0].status == "starting"
        # its own Conway key, by signing in with its own wallet; nothing of the parent's reached it
        [account] = cloud.accounts.values()
        assert account["address"].lower() == child.address.lower() and account["balance_cents"] == 700
        secrets = (cloud.api_key.encode(), parent.wallet.key_bytes().hex().encode())
        assert not any(secret in r.body for r in cloud.requests for secret in secrets)
        for path in home.rglob("*"):
            if path.is_file():
                assert not any(secret in path.read_bytes() for secret in secrets), path

        # healthy: its agent runs as a process of its own, its creator the parent
        report = wait_for(lambda: (r := child_report(cloud, sandbox_id))["running"] and r, "the child to run")
        assert report["address"].lower() == child.address.lower()
        assert report["creator"].lower() == parent_address.lower()
        model.script(openai_answer(None, [call("check_child_status", child_id=child.id)]), openai_answer("Fine."))
        parent.loop.run_cycle("test")
        assert list_children(parent.db)[0].status == "healthy"

        wait_for(lambda: any(m["from"] == child.address.lower() for m in relay.log), "the child's answer", 120)
        poll = task_context(parent, relay=parent.relay)
        from automaton_min.heartbeat.social_inbox import check_social_inbox

        check_social_inbox(poll)
        model.script(openai_answer("My child said hello."))
        parent.loop.run_cycle("test")
        [(sender, kind)] = parent.db.query("SELECT entity_address, relationship_type FROM relationship_memory "
                                           "WHERE relationship_type = 'child'")
        assert sender.lower() == child.address.lower()
        assert parent.db.scalar("SELECT COUNT(*) FROM inbox_messages WHERE lower(from_address) = ?",
                                (child.address.lower(),)) == 1

        # killed: the health check restarts it
        health = children_tasks(build)["check_child_health"]
        kill_child(cloud, sandbox_id)
        outcome = health(task_context(parent))
        assert "restarted" in outcome.summary, outcome.summary
        wait_for(lambda: child_report(cloud, sandbox_id)["running"], "the restarted child to run")
        assert "healthy" in health(task_context(parent)).summary
        assert list_children(parent.db)[0].status == "healthy"

        # killed for good (its program gone): three restarts fail, then it is dead, then pruned
        kill_child(cloud, sandbox_id)
        (cloud.directory(sandbox_id) / "root" / "automaton-min").unlink()
        summaries = [health(task_context(parent)).summary for _ in range(4)]
        assert all("restart failed" in line for line in summaries[:3]), summaries
        assert "stopped, dead" in summaries[3] and list_children(parent.db)[0].status == "stopped"
        post_wake(parent.db, "heartbeat", "tidy up", now_ms=system_now())  # its own turn again, after the child's
        model.script(openai_answer(None, [call("prune_dead_children", keep_last=0)]), openai_answer("Pruned."))
        parent.loop.run_cycle("heartbeat")
        assert list_children(parent.db)[0].status == "cleaned_up" and cloud.deleted == [sandbox_id]
        steps = [row[0] for row in parent.db.query("SELECT to_state FROM child_lifecycle_events ORDER BY created_at, "
                                                   "id")]
        assert steps[:7] == ["requested", "sandbox_created", "runtime_ready", "wallet_verified", "funded", "starting",
                             "healthy"]
        assert steps[-2:] == ["stopped", "cleaned_up"]
        assert cloud.credited == {child.address.lower(): 700}  # funded once, whatever else happened
        shown = json.loads(cli("children", "--json").stdout)["children"]
        assert [(c["name"], c["status"], c["fundedCents"]) for c in shown] == [("kid", "cleaned_up", 700)]
        assert [step["to"] for step in shown[0]["steps"]] == steps


def answer_as_child(body: dict, parent_address: str) -> dict:
    """The child's model: it answers its parent's hello once, else it sleeps."""
    said = json.dumps(body.get("messages", []))
    if "hello kid" in said and "hello parent" not in said:
        return openai_answer(None, [call("send_message", to_address=parent_address, content="hello parent")])
    return openai_answer("resting", [call("sleep", duration_seconds=3600, reason="nothing to do")])


def task_context(agent, relay=None):
    from automaton_min.config import load_config
    from automaton_min.heartbeat.task_api import TaskContext

    return TaskContext(agent.db, load_config(agent.loop.services.home, {}), agent.loop.services.home, agent.now,
                       "normal", agent.wallet.address, conway=agent.loop.services.conway, relay=relay)


def kill_child(cloud, sandbox_id: str) -> None:
    """SIGKILL the child's agent, as a crash would, and wait until its sandbox says it is not running."""
    pid = child_report(cloud, sandbox_id)["pid"]
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # its session: the one-file binary's bootloader too
    wait_for(lambda: not child_report(cloud, sandbox_id)["running"], "the child to be gone")
