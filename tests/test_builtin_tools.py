"""The built-in tools through ToolRegistry.execute, against real peers: a LocalSandbox on a temp workspace, the
Conway stand-in, a real EVM with the x402 SDK's server, a real database and home directory."""

from __future__ import annotations

from dataclasses import dataclass
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from automaton_min.agent.loop import LoopState
from automaton_min.agent.tools.base import ToolContext
from automaton_min.agent.tools.builtin import IDLE_ONLY_TOOLS, MUTATING_TOOLS, STATUS_CHECK_TOOLS, builtin_tools
from automaton_min.agent.tools.loop_control import TRANSFERS_KEY
from automaton_min.agent.tools.services import LoopControl, ToolServices
from automaton_min.agent.tools.registry import MAX_RESULT_CHARS, ToolOutcome, ToolRegistry
from automaton_min.chain.wallet import Wallet, create_wallet
from automaton_min.clock import to_iso
from automaton_min.config import Config, config_from, save_config
from automaton_min.conway.client import ConwayClient
from automaton_min.conway.local import LocalSandbox
from automaton_min.conway.local import ExecResult
from automaton_min.runtime.sandboxes import RemoteSandbox
from automaton_min.net.http import request  # plain: these tests read single answers, without retries
from automaton_min.home import Home
from automaton_min.inference.registry import ModelRegistry
from automaton_min.store.kv import get_value
from automaton_min.treasury.payer import Payer
from automaton_min.treasury.spend import SpendTracker
from standins.conway_api import ConwayApi

CREATOR = "0x1234567890AbcdEF1234567890aBcdef12345678"
FRIEND = "0x00000000000000000000000000000000000000F1"
ONE_USDC = 1_000_000
REGISTRY = ToolRegistry(builtin_tools())

# From the anchor inventory, section 1.1, restricted to the tools of this issue.
INVENTORY_MUTATING = {
    "exec", "write_file", "transfer_credits", "topup_credits", "create_sandbox", "send_message", "update_genesis_prompt",
    "modify_heartbeat", "expose_port", "remove_port", "x402_fetch", "distress_signal", "sleep", "update_soul",
    "enter_low_compute", "switch_model", "spawn_child", "start_child", "fund_child", "message_child",
    "prune_dead_children",
}
INVENTORY_IDLE_ONLY = {"check_credits", "check_usdc_balance", "system_synopsis", "list_sandboxes", "list_models",
                       "heartbeat_ping", "check_inference_spending", "list_children", "check_child_status",
                       "orchestrator_status", "list_goals", "get_plan"}
NAMES = {
    "exec", "read_file", "write_file", "check_credits", "check_usdc_balance", "topup_credits", "transfer_credits",
    "x402_fetch", "sleep", "system_synopsis", "heartbeat_ping", "distress_signal", "enter_low_compute", "send_message",
    "list_models", "switch_model", "check_inference_spending", "modify_heartbeat", "update_genesis_prompt", "view_soul",
    "view_soul_history", "reflect_on_soul",
    "update_soul", "expose_port", "remove_port", "create_sandbox", "list_sandboxes", "stop_job",
}
MEMORY_MUTATING = {"remember_fact", "set_goal", "complete_goal", "save_procedure", "note_about_agent", "forget"}
MEMORY_IDLE_ONLY = {"recall_facts", "recall_procedure", "review_memory"}
CHILDREN = {"spawn_child", "start_child", "fund_child", "list_children", "check_child_status", "message_child",
            "verify_child_constitution", "prune_dead_children"}
GOALS = {"create_goal", "list_goals", "get_plan", "orchestrator_status", "cancel_goal", "complete_task", "assign_task"}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def config(home: Home) -> Config:
    home.ensure()
    cfg = config_from({"name": "ada", "genesisPrompt": "Earn your keep.", "creatorAddress": CREATOR,
                       "treasuryPolicy": {"x402AllowedDomains": ["127.0.0.1"], "knownPayees": [FRIEND]}})
    save_config(home, cfg)
    return cfg


@pytest.fixture
def workspace(tmp_path: Path) -> LocalSandbox:
    return LocalSandbox(tmp_path / "ws")


@pytest.fixture
def loop() -> LoopState:
    return LoopState()


@dataclass
class StubBalances:
    """Balances as a test sets them: a value, or a callable (which may raise)."""

    credits: Any = 1234
    usdc: Any = None

    def credits_cents(self) -> Any:
        return self.credits() if callable(self.credits) else self.credits

    def usdc_atomic(self) -> Any:
        return self.usdc() if callable(self.usdc) else self.usdc


@pytest.fixture
def make_ctx(db, config, clock, home, workspace, loop):
    def make(authority: str = "agent", *, credits_cents: Any = 1234, usdc_balance: Any = None,
             transfers_this_turn: int | None = None, **services: Any) -> ToolContext:
        if transfers_this_turn is not None:
            loop.extra[TRANSFERS_KEY] = transfers_this_turn
        base = {"sandbox": workspace, "home": home, "loop": loop, "wallet_address": FRIEND,
                "balances": StubBalances(credits_cents, usdc_balance), **services}
        return ToolContext(db, config, clock, "turn-1", authority, ToolServices(**base))
    return make


@pytest.fixture
def api():
    with ConwayApi() as server:
        yield server


@pytest.fixture
def conway(api: ConwayApi, db, clock) -> ConwayClient:
    return ConwayClient(api.url, api.api_key, send=request, db=db, now=clock, sandbox_id="sb-1")


def run(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> ToolOutcome:
    return REGISTRY.execute(ctx, "call-1", name, args or {})


def ok(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> str:
    outcome = run(ctx, name, args)
    assert outcome.ok, outcome.error
    return outcome.result


def fails(ctx: ToolContext, name: str, args: dict[str, Any] | None = None) -> str:
    outcome = run(ctx, name, args)
    assert not outcome.ok and outcome.result == "", outcome.result
    assert "failed unexpectedly" not in outcome.error, outcome.error
    return outcome.error


# --------------------------------------------------------------------------- the catalogue


def test_every_builtin_is_registered_with_a_strict_schema() -> None:
    specs = {spec.name: spec for spec in REGISTRY.specs()}
    assert set(specs) == NAMES | MEMORY_MUTATING | MEMORY_IDLE_ONLY | CHILDREN | GOALS
    for spec in specs.values():
        assert spec.description and spec.category in {"vm", "conway", "financial", "survival", "self_mod", "memory",
                                                       "replication", "orchestration"}, spec.name
        assert spec.risk in {"safe", "caution", "dangerous"}, spec.name
        assert spec.parameters["type"] == "object" and spec.parameters["additionalProperties"] is False, spec.name
        assert set(spec.parameters.get("required", [])) <= set(spec.parameters["properties"]), spec.name
        assert not (spec.mutating and spec.status_check), spec.name


def test_flags_match_the_inventory() -> None:
    # ours: stop_job (background jobs), assign_task (a goal's task to a child)
    assert MUTATING_TOOLS == INVENTORY_MUTATING | MEMORY_MUTATING | {"stop_job", "assign_task"}
    assert STATUS_CHECK_TOOLS == IDLE_ONLY_TOOLS == INVENTORY_IDLE_ONLY | MEMORY_IDLE_ONLY | {"view_soul", "view_soul_history",
                                                                                     "reflect_on_soul"}
    assert "read_file" not in MUTATING_TOOLS | STATUS_CHECK_TOOLS
    risky = {spec.name for spec in REGISTRY.specs() if spec.risk == "dangerous"}
    assert risky == {"transfer_credits", "x402_fetch", "topup_credits", "update_genesis_prompt", "spawn_child",
                     "fund_child", "prune_dead_children"}
    assert {spec.name: spec.risk for spec in REGISTRY.specs()}["exec"] == "caution"
    assert set(STATUS_CHECK_TOOLS) <= {spec.name for spec in REGISTRY.specs() if spec.risk == "safe"}


def test_the_loop_state_is_a_loop_control() -> None:
    assert isinstance(LoopState(), LoopControl)


# --------------------------------------------------------------------------- validation and missing services


@pytest.mark.parametrize(("name", "args", "problem"), [
    ("sleep", {"duration_seconds": -5}, "duration_seconds: expected at least 10"),
    ("sleep", {"duration_seconds": 10**9}, "duration_seconds: expected at most 86400"),
    ("sleep", {"duration_seconds": "60"}, "duration_seconds: expected a whole number, got a string"),
    ("sleep", {"seconds": 60}, "seconds: not an argument of this tool"),
    ("expose_port", {"port": 70000}, "port: expected at most 65535"),
    ("remove_port", {"port": 0}, "port: expected at least 1"),
    ("exec", {"command": "ls", "timeout": 10}, "timeout: expected at least 1000"),
    ("exec", {"command": "ls", "sudo": True}, "sudo: not an argument of this tool"),
    ("transfer_credits", {"to_address": FRIEND, "amount_cents": 0}, "amount_cents: expected at least 1"),
    ("transfer_credits", {"to_address": FRIEND, "amount_cents": 1.5}, "amount_cents: expected a whole number"),
    ("transfer_credits", {"to_address": "bob", "amount_cents": 5}, "to_address: does not match the pattern"),
    ("x402_fetch", {"url": "file:///etc/passwd"}, "url: does not match the pattern"),
    ("x402_fetch", {"url": "https://a.b", "method": "TRACE"}, "method: expected one of"),
    ("topup_credits", {"amount_usd": 7}, "amount_usd: expected one of 5, 25, 100"),
    ("switch_model", {}, "model_id: missing (required)"),
    ("update_genesis_prompt", {"new_prompt": "x" * 2001, "reason": "r"}, "new_prompt: expected at most 2000 characters"),
    ("update_soul", {"content": "x" * 5001}, "content: expected at most 5000 characters"),
    ("modify_heartbeat", {"action": "rename", "name": "x"}, "action: expected one of"),
    ("send_message", {"to_address": FRIEND, "content": ""}, "content: expected at least 1 characters"),
])
def test_bad_arguments_are_a_readable_error_and_nothing_runs(make_ctx, loop, name, args, problem) -> None:
    error = fails(make_ctx(), name, args)
    assert error.startswith("invalid arguments: ") and problem in error, error
    assert loop.sleep_request is None and not loop.low_compute


@pytest.mark.parametrize(("name", "args", "service"), [
    ("exec", {"command": "true"}, "sandbox"),
    ("read_file", {"path": "a"}, "sandbox"),
    ("write_file", {"path": "a", "content": ""}, "sandbox"),
    ("expose_port", {"port": 80}, "sandbox"),
    ("remove_port", {"port": 80}, "sandbox"),
    ("create_sandbox", {}, "conway"),
    ("list_sandboxes", {}, "conway"),
    ("check_credits", {}, "conway"),
    ("transfer_credits", {"to_address": FRIEND, "amount_cents": 5}, "conway"),
    ("check_usdc_balance", {}, "balances"),
    ("topup_credits", {"amount_usd": 5}, "payer"),
    ("x402_fetch", {"url": "https://conway.tech/x"}, "payer"),
    ("sleep", {"duration_seconds": 60}, "loop"),
    ("distress_signal", {}, "loop"),
    ("enter_low_compute", {}, "loop"),
    ("list_models", {}, "registry"),
    ("switch_model", {"model_id": "gpt-5.2"}, "registry"),
    ("view_soul", {}, "home"),
    ("update_soul", {"content": "me"}, "home"),
    ("update_genesis_prompt", {"new_prompt": "p", "reason": "r"}, "home"),
    ("send_message", {"to_address": FRIEND, "content": "hi"}, "relay"),
    ("modify_heartbeat", {"action": "remove", "name": "x"}, "heartbeat"),
])
def test_a_missing_service_is_named(db, config, clock, name, args, service) -> None:
    ctx = ToolContext(db, config, clock, "turn-1", "agent", ToolServices())
    assert f"(service '{service}' is missing)" in fails(ctx, name, args)


def test_the_later_issues_say_what_is_missing(make_ctx) -> None:
    assert "the social relay is not configured yet" in fails(make_ctx(), "send_message", {"to_address": FRIEND, "content": "hi"})
    assert "heartbeat scheduler is not configured yet" in fails(make_ctx(), "modify_heartbeat", {"action": "remove", "name": "x"})
    assert "automaton-min provision" in fails(make_ctx(conway=None), "check_credits")


def test_send_message_and_modify_heartbeat_delegate(make_ctx) -> None:
    sent: list[tuple] = []
    changed: list[tuple] = []

    class Relay:
        def send(self, to, content, reply_to=None, *, db=None, turn_id=None, call_index=None):
            sent.append((to, content, reply_to))
            return {"id": "msg-7"}

    class Heartbeat:
        def modify(self, action, name, *, schedule=None, task=None, enabled=None):
            changed.append((action, name, schedule, task, enabled))
            return f"heartbeat entry {name} {action}ed"

    ctx = make_ctx(relay=Relay(), heartbeat=Heartbeat())
    assert ok(ctx, "send_message", {"to_address": FRIEND, "content": "hello", "reply_to": "m1"}) == f"Message sent to {FRIEND} (id msg-7)"
    assert sent == [(FRIEND, "hello", "m1")]
    assert ok(ctx, "modify_heartbeat", {"action": "add", "name": "ping", "schedule": "*/30 * * * *"}) == "heartbeat entry ping added"
    assert changed == [("add", "ping", "*/30 * * * *", None, None)]


# --------------------------------------------------------------------------- exec


def test_exec_reports_exit_code_stdout_and_stderr(make_ctx) -> None:
    result = ok(make_ctx(), "exec", {"command": "echo out; echo err >&2; pwd; exit 3"})
    lines = result.splitlines()
    assert lines[0] == "exit_code: 3"
    assert "stdout:\nout" in result and "stderr:\nerr" in result and str(make_ctx().services.sandbox.workspace) in result
    assert "timed_out" not in result and "truncated" not in result


def test_exec_says_when_output_was_cut_or_the_command_stopped(make_ctx, tmp_path) -> None:
    small = LocalSandbox(tmp_path / "small", max_output_bytes=10)
    result = ok(make_ctx(sandbox=small), "exec", {"command": "printf '%s' 0123456789ABCDEFGHIJ"})
    assert "truncated: true" in result and "0123456789" in result and "ABCDEFGHIJ" not in result

    class Stopped:
        def exec(self, command, timeout_s=None):
            assert timeout_s == 2.0
            return ExecResult("partial", "", -15, timed_out=True)

    stopped = ok(make_ctx(sandbox=Stopped()), "exec", {"command": "sleep 99", "timeout": 2000})
    assert stopped.splitlines()[:2] == ["exit_code: -15", "timed_out: true (stopped after 2 s with everything it started)"]
    assert "stderr: (empty)" in stopped


def test_exec_in_a_conway_sandbox_and_its_refusal(make_ctx, api, conway) -> None:
    ctx = make_ctx(sandbox=RemoteSandbox(conway, "sb-1"))
    assert "stdout:\nran: cd /root && uname" in ok(ctx, "exec", {"command": "uname"})
    api.fail("/v1/sandboxes/sb-1/exec", 403, {"error": "forbidden"})
    error = fails(ctx, "exec", {"command": "uname"})
    assert error.startswith("exec failed:") and "not run" in error and api.api_key not in error


# --------------------------------------------------------------------------- files


def test_write_then_read_a_file_in_the_workspace(make_ctx, workspace) -> None:
    ctx = make_ctx()
    target = workspace.workspace / "notes" / "plan.md"
    assert ok(ctx, "write_file", {"path": "notes/plan.md", "content": "build a thing\n"}) == f"File written: {target} (14 bytes)"
    assert target.read_text() == "build a thing\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert ok(ctx, "read_file", {"path": "~/notes/plan.md"}) == "build a thing\n"
    assert "no such file: gone.txt" in fails(ctx, "read_file", {"path": "gone.txt"})
    assert "is a directory" in fails(ctx, "read_file", {"path": "notes"})


def test_read_file_refuses_big_files_and_results_are_capped(make_ctx, workspace) -> None:
    ctx = make_ctx()
    ok(ctx, "write_file", {"path": "big.txt", "content": "y" * 15_000})
    capped = ok(ctx, "read_file", {"path": "big.txt"})
    assert capped.startswith("y" * MAX_RESULT_CHARS) and "[truncated: 5000 more characters]" in capped
    (workspace.workspace / "huge.log").write_bytes(b"z" * ((1 << 20) + 1))
    assert "use exec with head" in fails(ctx, "read_file", {"path": "huge.log"}).lower()


def test_read_file_never_reads_secrets(make_ctx, workspace, home) -> None:
    ctx = make_ctx()
    ws = workspace.workspace
    ws.mkdir(parents=True)
    secret = "SECRET-0xfeedface"
    for name in ("wallet.json", ".env", "server.pem", "id.key", "private-key.txt", "automaton.json"):
        (ws / name).write_text(secret)
    (ws / ".automaton").mkdir()
    (ws / ".automaton" / "config.json").write_text(secret)
    home.wallet_path.write_text(secret)
    os.symlink(home.wallet_path, ws / "innocent.txt")
    for path in ("wallet.json", ".env", "server.pem", "id.key", "private-key.txt", "automaton.json",
                 ".automaton/config.json", "innocent.txt", str(home.wallet_path), str(home.api_key_path)):
        error = fails(ctx, "read_file", {"path": path})
        assert "holds secrets" in error and secret not in error, path
    (ws / "config.json").write_text('{"ok": true}')  # an ordinary project's config.json is fine
    assert ok(ctx, "read_file", {"path": "config.json"}) == '{"ok": true}'


def test_write_file_stays_in_the_workspace_and_off_the_runtimes_files(make_ctx, workspace, tmp_path) -> None:
    ctx = make_ctx()
    for path in ("../escape.txt", str(tmp_path / "elsewhere.txt"), "/etc/cron.d/x"):
        assert "outside your workspace" in fails(ctx, "write_file", {"path": path, "content": "x"}), path
    for path in ("wallet.json", ".automaton/automaton.json", ".automaton/state.db", ".automaton/constitution.md"):
        assert "never overwritten" in fails(ctx, "write_file", {"path": path, "content": "x"}), path
    assert "update_soul" in fails(ctx, "write_file", {"path": ".automaton/SOUL.md", "content": "x"})
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "elsewhere.txt").exists()
    assert not workspace.workspace.exists() or not any(workspace.workspace.rglob("*"))


def test_files_in_a_conway_sandbox(make_ctx, api, conway) -> None:
    ctx = make_ctx(sandbox=RemoteSandbox(conway, "sb-1"))
    assert ok(ctx, "write_file", {"path": "~/app/main.py", "content": "print(1)"}) == "File written: /root/app/main.py (8 bytes)"
    assert api.files[("sb-1", "~/app/main.py")] == "print(1)"
    api.files[("sb-1", "/root/readme")] = "hello"
    assert ok(ctx, "read_file", {"path": "/root/readme"}) == "hello"
    assert "outside /root" in fails(ctx, "write_file", {"path": "/etc/passwd", "content": "x"})
    assert "holds secrets" in fails(ctx, "read_file", {"path": "/root/.automaton/wallet.json"})
    assert "holds secrets" in fails(ctx, "read_file", {"path": "~/.automaton/config.json"})
    assert "404" in fails(ctx, "read_file", {"path": "/root/missing"})


# --------------------------------------------------------------------------- ports and sandboxes


def test_ports_locally_and_in_a_conway_sandbox(make_ctx, api, conway) -> None:
    local = ok(make_ctx(), "expose_port", {"port": 8080})
    assert local.startswith("Port 8080 exposed at: http://localhost:8080") and "this machine only" in local
    assert ok(make_ctx(), "remove_port", {"port": 8080}) == "Port 8080 removed"

    remote = make_ctx(sandbox=RemoteSandbox(conway, "sb-1"))
    assert ok(remote, "expose_port", {"port": 3000}) == "Port 3000 exposed at: https://3000-sb-1.life.conway.tech"
    assert ok(remote, "remove_port", {"port": 3000}) == "Port 3000 removed"
    assert ("sb-1", 3000) not in api.ports
    assert "404" in fails(remote, "remove_port", {"port": 3000})


def test_create_and_list_sandboxes(make_ctx, api, conway) -> None:
    ctx = make_ctx(conway=conway)
    created = ok(ctx, "create_sandbox", {"name": "worker", "memory_mb": 1024})
    new_id = next(sid for sid in api.sandboxes if sid != "sb-1")
    assert created == f"Sandbox created: {new_id} [provisioning] 1 vCPU, 1024 MB RAM, 5 GB disk in us-east"
    assert api.sandboxes[new_id]["name"] == "worker"
    listed = ok(ctx, "list_sandboxes").splitlines()
    assert listed[0] == "sb-1 [running] 1vCPU/512MB eu" and listed[1] == f"{new_id} [provisioning] 1vCPU/1024MB us-east"
    api.sandboxes.clear()
    assert ok(ctx, "list_sandboxes") == "No sandboxes."
    api.fail("/v1/sandboxes", 500)
    assert "cannot list sandboxes" in fails(ctx, "list_sandboxes")


# --------------------------------------------------------------------------- balances


def test_check_credits_live_then_last_known(make_ctx, api, conway, clock) -> None:
    ctx = make_ctx(conway=conway)
    assert ok(ctx, "check_credits") == "Credit balance: $12.34 (1234 cents), survival tier high"
    read_at = to_iso(clock())
    clock.advance(60_000)
    api.fail("/v1/credits/balance", 503)
    stale = ok(ctx, "check_credits")
    assert stale.startswith("Credit balance: $12.34 (1234 cents)") and f"last known balance, from {read_at}" in stale


def test_check_credits_unknown_is_not_zero(make_ctx, api, db, clock) -> None:
    fresh = ConwayClient(api.url, api.api_key, send=request, now=clock, sandbox_id="sb-1")
    api.fail("/v1/credits/balance", 503)
    error = fails(make_ctx(conway=fresh), "check_credits")
    assert "unknown (not zero)" in error and "$0.00" not in error


def test_check_usdc_balance(make_ctx) -> None:
    assert ok(make_ctx(usdc_balance=lambda: 12_345_678), "check_usdc_balance") == f"USDC balance: 12.345678 USDC on Base (wallet {FRIEND})"

    def broken() -> int:
        raise OSError("node unreachable")

    assert "unknown (not zero): node unreachable" in fails(make_ctx(usdc_balance=broken), "check_usdc_balance")


# --------------------------------------------------------------------------- credit transfers


def transfer_requests(api: ConwayApi) -> list:
    return api.requests_to("/v1/credits/transfer") + api.requests_to("/v1/credits/transfers")


def test_transfer_sends_records_and_counts(make_ctx, api, conway, db, loop) -> None:
    api.balance_cents = 10_000
    result = ok(make_ctx(conway=conway), "transfer_credits", {"to_address": FRIEND, "amount_cents": 2000, "reason": "rent"})
    assert result.startswith(f"Sent $20.00 (2000 cents) of credits to {FRIEND} (status completed, id tr_")
    assert result.endswith("; balance now $80.00")
    assert api.balance_cents == 8000 and len(transfer_requests(api)) == 1
    assert transfer_requests(api)[0].json() == {"to_address": FRIEND, "amount_cents": 2000, "note": "rent"}
    assert db.query("SELECT category, amount_cents, recipient FROM spend_tracking") == [("transfer", 2000, FRIEND)]
    assert db.query("SELECT type, amount_cents FROM transactions") == [("transfer_out", 2000)]
    assert loop.extra["transfers_this_turn"] == 1


def test_the_tool_itself_refuses_an_unknown_payee(make_ctx, api, conway, db) -> None:
    stranger = "0x" + "5e" * 20
    error = fails(make_ctx(conway=conway), "transfer_credits", {"to_address": stranger, "amount_cents": 100})
    assert error.startswith(f"transfer refused: {stranger} is not a known payee"), error
    assert transfer_requests(api) == [] and db.query("SELECT * FROM spend_tracking") == []


@pytest.mark.parametrize(("balance", "amount", "services", "reason"), [
    (100_000, 6000, {}, "per-transfer cap of 5000 cents"),
    (3000, 2000, {}, "more than half of your balance"),
    (1800, 900, {}, "below the reserve of 1000 cents"),
    (100_000, 100, {"transfers_this_turn": 2}, "already 2 transfers this turn"),
])
def test_transfers_past_a_limit_are_refused_and_nothing_is_sent(make_ctx, api, conway, db, balance, amount, services, reason) -> None:
    api.balance_cents = balance
    error = fails(make_ctx(conway=conway, **services), "transfer_credits", {"to_address": FRIEND, "amount_cents": amount})
    assert error.startswith("transfer refused: ") and reason in error, error
    assert transfer_requests(api) == [] and api.balance_cents == balance
    assert db.query("SELECT * FROM spend_tracking") == [] and db.query("SELECT * FROM transactions") == []


def test_the_per_turn_limit_counts_the_tools_own_transfers(make_ctx, api, conway, loop) -> None:
    api.balance_cents = 100_000
    ctx = make_ctx(conway=conway)
    for _ in range(2):
        ok(ctx, "transfer_credits", {"to_address": FRIEND, "amount_cents": 100})
    assert "already 2 transfers this turn (limit 2)" in fails(ctx, "transfer_credits", {"to_address": FRIEND, "amount_cents": 100})
    assert len(transfer_requests(api)) == 2


def test_a_transfer_with_an_unknown_balance_or_count_is_refused(make_ctx, api, conway, db, config, clock) -> None:
    api.fail("/v1/credits/balance", 503)
    error = fails(make_ctx(conway=conway), "transfer_credits", {"to_address": FRIEND, "amount_cents": 100})
    assert "credit balance is unknown" in error
    api.clear_faults()
    no_count = ToolContext(db, config, clock, "t", "agent", ToolServices(conway=conway))
    assert "number of transfers made this turn is unknown" in fails(no_count, "transfer_credits",
                                                                    {"to_address": FRIEND, "amount_cents": 100})
    assert transfer_requests(api) == []


def test_a_transfer_conway_refuses_is_not_counted_as_spent(make_ctx, api, conway, db) -> None:
    api.balance_cents = 100_000
    api.fail("/v1/credits/transfer", 400, {"error": "recipient unknown"})
    error = fails(make_ctx(conway=conway), "transfer_credits", {"to_address": FRIEND, "amount_cents": 100})
    assert error.startswith("transfer refused by Conway:") and "recipient unknown" in error
    assert db.query("SELECT * FROM spend_tracking") == []


# --------------------------------------------------------------------------- x402 and top-ups (real EVM, x402 SDK server)


@pytest.fixture
def wallet(home: Home, clock, chain) -> Wallet:
    home.ensure()
    created = create_wallet(home.wallet_path, clock)
    chain.mint(created.address, 100 * ONE_USDC)
    return created


@pytest.fixture
def payer(db, wallet, chain) -> Payer:
    return Payer(db, wallet, balance_of=chain.balance_of, timeout=10)


def test_x402_fetch_pays_within_the_limits(make_ctx, payer, chain, merchant, x402_v2, db) -> None:
    before = chain.balance_of(merchant.address)
    result = ok(make_ctx(payer=payer), "x402_fetch", {"url": x402_v2.url + "/paid"})
    lines = result.splitlines()
    assert lines[0] == "HTTP 200"
    assert lines[1].startswith(f"paid 0.010000 USDC to {merchant.address} (payment ") and "settled, transaction 0x" in lines[1]
    assert chain.balance_of(merchant.address) == before + 10_000
    assert db.query("SELECT category, amount_cents, tool_name FROM spend_tracking") == [("x402", 1, "x402_fetch")]


def test_x402_fetch_of_a_free_resource_pays_nothing(make_ctx, payer, chain, merchant, x402_v2, db) -> None:
    result = ok(make_ctx(payer=payer), "x402_fetch", {"url": x402_v2.url + "/free", "headers": {"Accept": "application/json"}})
    assert result == "HTTP 200\n{\"ok\":true,\"paid\":false}\n"
    assert db.query("SELECT * FROM payment_intents") == []


@pytest.mark.parametrize(("policy", "args", "reason"), [
    ({"x402AllowedDomains": ["conway.tech"]}, {}, "127.0.0.1 is not in the allowed domains"),
    ({"maxX402PaymentCents": 0}, {}, "above the allowed 0.000000 USDC"),
    ({}, {"max_payment_cents": 1, "headers": {"X-PAYMENT": "forged"}}, "set by the payment flow itself"),
    ({"minimumReserveCents": 9_999_99}, {}, "below the reserve"),
])
def test_x402_fetch_refuses_past_its_limits(make_ctx, payer, chain, merchant, x402_v2, db, config, policy, args, reason) -> None:
    config.values["treasuryPolicy"] = {**config.values["treasuryPolicy"], **policy}
    before = chain.balance_of(merchant.address)
    error = fails(make_ctx(payer=payer), "x402_fetch", {"url": x402_v2.url + "/paid", **args})
    assert reason in error, error
    assert chain.balance_of(merchant.address) == before
    assert db.query("SELECT * FROM payment_intents") == [] and db.query("SELECT * FROM spend_tracking") == []


@pytest.fixture(scope="module")
def pricey(chain, merchant):
    """An x402 v2 server asking 5 cents."""
    from standins.x402_server import X402Server

    with X402Server(chain, pay_to=merchant.address, version=2, price_atomic=50_000) as server:
        yield server


def test_x402_fetch_pays_no_more_than_the_caller_allows(make_ctx, payer, chain, merchant, pricey, db) -> None:
    before = chain.balance_of(merchant.address)
    error = fails(make_ctx(payer=payer), "x402_fetch", {"url": pricey.url + "/paid", "max_payment_cents": 4})
    assert "amount 0.050000 USDC is above the allowed 0.040000 USDC" in error
    assert chain.balance_of(merchant.address) == before
    assert ok(make_ctx(payer=payer), "x402_fetch", {"url": pricey.url + "/paid", "max_payment_cents": 5}).startswith("HTTP 200\npaid 0.050000 USDC")
    assert chain.balance_of(merchant.address) == before + 50_000


def test_topup_credits_buys_an_exact_tier(make_ctx, payer, chain, merchant, x402_v2, db, config, wallet) -> None:
    config.values["conwayApiUrl"] = x402_v2.url
    before = chain.balance_of(merchant.address)
    result = ok(make_ctx(payer=payer), "topup_credits", {"amount_usd": 5})
    assert result.startswith("Bought credits: paid 5 USDC, +$5.00 (500 cents) (payment ") and "transaction 0x" in result
    assert chain.balance_of(merchant.address) == before + 5 * ONE_USDC
    assert db.query("SELECT type, amount_cents FROM transactions") == [("topup", 500)]

    poor = Payer(db, wallet, balance_of=lambda address: 4 * ONE_USDC, timeout=10)
    error = fails(make_ctx(payer=poor), "topup_credits", {"amount_usd": 5})
    assert error.startswith("top-up of $5 failed: ") and "less than the $5 top-up" in error
    assert chain.balance_of(merchant.address) == before + 5 * ONE_USDC


# --------------------------------------------------------------------------- survival


def test_sleep_asks_the_loop(make_ctx, loop) -> None:
    result = ok(make_ctx(), "sleep", {"duration_seconds": 600, "reason": "nothing to do"})
    assert loop.sleep_request == (600, "nothing to do") and "600 s" in result
    ok(make_ctx(), "sleep", {"duration_seconds": 10})
    assert loop.sleep_request == (10, "no reason given")


def test_enter_low_compute_sets_the_flag_and_remembers_it(make_ctx, loop, db, clock) -> None:
    result = ok(make_ctx(), "enter_low_compute", {"reason": "saving credits"})
    assert loop.low_compute is True and "gpt-5-mini" in result
    assert orjson.loads(get_value(db, "low_compute_mode")) == {"since": to_iso(clock()), "reason": "saving credits"}


def test_distress_signal_records_and_flags(make_ctx, loop, db, clock) -> None:
    result = ok(make_ctx(credits_cents=lambda: 7), "distress_signal", {"message": "please fund me"})
    stored = orjson.loads(get_value(db, "last_distress"))  # no relay in this run: recorded, and why nothing went
    assert stored == {"level": "critical", "name": "ada", "address": FRIEND, "creditsCents": 7, "usdcAtomic": None,
                      "source": "agent", "message": "please fund me", "creator": CREATOR, "timestamp": to_iso(clock()),
                      "sent": False, "why": "no relay: socialRelayUrl is empty"}
    assert loop.distress is True and FRIEND in result and "$0.07" in result
    assert "the message to your creator: not sent: no relay" in result


def test_heartbeat_ping_records_state_and_credits(make_ctx, db, clock) -> None:
    from automaton_min.store.kv import set_value

    set_value(db, "agent_state", "running", clock())
    set_value(db, "start_time", to_iso(clock() - 3_600_000), clock())
    result = ok(make_ctx(credits_cents=lambda: 40), "heartbeat_ping")
    stored = orjson.loads(get_value(db, "last_heartbeat_ping"))
    assert (stored["state"], stored["creditsCents"], stored["tier"], stored["uptimeSeconds"], stored["timestamp"]) == (
        "running", 40, "low_compute", 3600, to_iso(clock()))
    assert result == f"Heartbeat recorded at {to_iso(clock())}: running | credits: $0.40 (40 cents) | tier: low_compute"


def test_system_synopsis_summarizes_without_secrets(make_ctx, api, conway, loop) -> None:
    loop.low_compute = True
    result = ok(make_ctx(conway=conway), "system_synopsis")
    for expected in ("Name: ada", f"Address: {FRIEND}", f"Creator: {CREATOR}", "State: setup", "Survival tier: high",
                     "Credits: $12.34 (1234 cents)", "Flags: low-compute mode", "Turns: 0 (last at never)", "Model: gpt-5.2",
                     "Sandbox: local mode", "Children: 0 alive / 0 total", "Conway API: configured",
                     "Last heartbeat ping: never"):
        assert expected in result, (expected, result)
    assert api.api_key not in result
    unknown = ok(make_ctx(credits_cents=lambda: None), "system_synopsis")
    assert "Survival tier: unknown" in unknown and "Credits: unknown" in unknown


def test_no_result_carries_the_wallet_key_or_an_api_key(make_ctx, api, conway, home, clock, workspace, db) -> None:
    home.ensure()
    wallet = create_wallet(home.wallet_path, clock)
    key = wallet.key_bytes().hex()
    ctx = make_ctx(conway=conway, wallet_address=wallet.address, registry=ModelRegistry(db, clock))
    results = []
    for name, args in [("system_synopsis", {}), ("heartbeat_ping", {}), ("distress_signal", {}), ("check_credits", {}),
                       ("list_sandboxes", {}), ("list_models", {}), ("check_inference_spending", {}), ("view_soul", {}),
                       ("exec", {"command": f"cat {home.wallet_path}; echo {api.api_key}; env"}),
                       ("read_file", {"path": str(home.wallet_path)})]:
        outcome = run(ctx, name, args)
        results.append(outcome.result + (outcome.error or ""))
    everything = "\n".join(results)
    assert "[redacted]" in everything  # the command did print them...
    for secret in (key, key.upper(), api.api_key):  # ...and neither reached a result
        assert secret not in everything
    api.fail("/v1/credits/balance", 401, {"error": f"bad key {api.api_key}"})
    assert api.api_key not in fails(make_ctx(conway=ConwayClient(api.url, api.api_key, send=request, now=clock)), "check_credits")


# --------------------------------------------------------------------------- models


def test_list_models_from_the_registry_and_from_conway(make_ctx, db, clock, conway) -> None:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    registry.set_enabled("gpt-4.1", False)
    lines = ok(make_ctx(registry=registry, credits_cents=lambda: 30), "list_models").splitlines()
    assert "your tier: low_compute" in lines[0]
    assert any(line.startswith("* gpt-5.2 (openai) needs tier normal | 18/140") and line.endswith("enabled, not at tier low_compute")
               for line in lines), lines
    assert any(line.startswith("  gpt-4.1 (openai)") and line.endswith("| disabled") for line in lines)
    assert any(line.startswith("  gpt-5-mini") and line.endswith("| enabled") for line in lines)

    empty = ModelRegistry(db, clock)
    db.execute("DELETE FROM model_registry")
    offered = ok(make_ctx(registry=empty, conway=conway), "list_models").splitlines()
    assert offered[0].startswith("Models offered by Conway")
    assert "* gpt-5.2 (openai) $1.75/$14" in offered and "retired" not in "\n".join(offered)


def test_switch_model_saves_the_configuration(make_ctx, db, clock, home, config) -> None:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    result = ok(make_ctx(registry=registry), "switch_model", {"model_id": "gpt-4.1", "reason": "cheaper"})
    assert result == "Inference model switched from gpt-5.2 to gpt-4.1 (cheaper); saved in automaton.json."
    saved = orjson.loads(home.config_path.read_bytes())
    assert saved["inferenceModel"] == saved["modelStrategy"]["inferenceModel"] == "gpt-4.1"
    assert stat.S_IMODE(home.config_path.stat().st_mode) == 0o600
    assert config.get("inferenceModel") == "gpt-4.1" and config.get("modelStrategy")["inferenceModel"] == "gpt-4.1"
    assert saved["name"] == "ada" and saved["genesisPrompt"] == "Earn your keep."


@pytest.mark.parametrize(("model", "credits", "reason"), [
    ("gpt-9", 1234, "is not in the model registry"),
    ("gpt-4.1", 1234, "is disabled"),
    ("gpt-5.3", 30, "needs the normal tier; you are at low_compute"),
])
def test_switch_model_refuses_what_the_registry_or_tier_does_not_allow(make_ctx, db, clock, home, config, model, credits, reason) -> None:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    registry.set_enabled("gpt-4.1", False)
    before = home.config_path.read_bytes()
    error = fails(make_ctx(registry=registry, credits_cents=lambda: credits), "switch_model", {"model_id": model})
    assert reason in error
    assert home.config_path.read_bytes() == before and config.get("inferenceModel") == "gpt-5.2"


def test_check_inference_spending(make_ctx, db, clock) -> None:
    spend = SpendTracker(db, clock)
    spend.record("inference", 7, "inference")
    clock.advance(2 * 3_600_000)
    spend.record("inference", 5, "inference")
    for model, cents in (("gpt-5.2", 9), ("gpt-5.2", 3), ("gpt-5-mini", 1)):
        db.execute("INSERT INTO inference_costs (id, session_id, turn_id, model, provider, input_tokens, output_tokens, cost_cents,"
                   " latency_ms, tier, task_type, created_at) VALUES (?, 's', 't', ?, 'openai', 100, 10, ?, 5, 'normal', 'agent_turn', ?)",
                   (f"{model}-{cents}", model, cents, to_iso(clock())))
    result = ok(make_ctx(), "check_inference_spending")
    assert "Last hour: 5 cents ($0.05)" in result and "Last 24 h: 12 cents ($0.12) of a daily cap of 50000" in result
    assert "  gpt-5.2: 12 cents over 2 calls (200 tokens in, 20 out)" in result and "  gpt-5-mini: 1 cents over 1 call " in result
    only = ok(make_ctx(), "check_inference_spending", {"model": "gpt-5-mini", "days": 7})
    assert "gpt-5.2:" not in only and "last 7 days" in only


# --------------------------------------------------------------------------- soul and purpose


def test_view_and_update_soul_keeps_every_version(make_ctx, home, db) -> None:
    ctx = make_ctx()
    assert "no SOUL.md yet" in ok(ctx, "view_soul")
    assert "no recorded versions" in ok(ctx, "view_soul_history")
    assert ok(ctx, "update_soul", {"content": "# Ada\nI build tools."}).startswith("SOUL.md updated to version 1 ")
    home.soul_path.write_text("# Ada\nI build tools, edited by hand.")  # a change no tool made is kept too
    result = ok(ctx, "update_soul", {"content": "# Ada\nI build and sell tools.", "reason": "learned"})
    assert result.startswith("SOUL.md updated to version 3 (") and "Every version is kept" in result
    assert home.soul_path.read_text() == "# Ada\nI build and sell tools." and stat.S_IMODE(home.soul_path.stat().st_mode) == 0o600
    history = ok(ctx, "view_soul_history").splitlines()
    assert [line.split(":")[0] for line in history] == ["version 3", "version 2", "version 1"]
    assert "by agent" in history[0] and history[0].endswith(": learned") and "by system" in history[1]
    assert ok(ctx, "view_soul_history", {"version": 1}).endswith("\n# Ada\nI build tools.")
    assert "no version 9" in fails(ctx, "view_soul_history", {"version": 9})
    assert db.scalar("SELECT COUNT(DISTINCT content_hash) FROM soul_history") == 3
    assert "already says exactly that" in ok(ctx, "update_soul", {"content": "# Ada\nI build and sell tools."})
    assert ok(ctx, "view_soul") == "# Ada\nI build and sell tools."
    assert "empty" in fails(ctx, "update_soul", {"content": "   "})


def test_reflect_on_soul_measures_it_against_the_purpose_without_a_model(make_ctx, home) -> None:
    ctx = make_ctx()  # the purpose: "Earn your keep."
    ok(ctx, "update_soul", {"content": "# Ada\nI build tools."})
    drifted = ok(ctx, "reflect_on_soul")
    assert "Alignment of your SOUL.md with your purpose: 0.00" in drifted and "does not say: earn, keep." in drifted
    assert "rewrite it with update_soul" in drifted and "version 1" in drifted
    ok(ctx, "update_soul", {"content": "# Ada\nI build tools to earn my keep."})
    agreed = ok(ctx, "reflect_on_soul")
    assert "does not say" not in agreed and agreed.endswith("Your soul and your purpose agree.")
    ok(ctx, "update_soul", {"content": "# Ada\nI build tools to earn my keep, and say so."})
    sources = [line.split(" by ")[1].split()[0].rstrip(",:") for line in ok(ctx, "view_soul_history").splitlines()]
    assert sources == ["reflection", "reflection", "agent"]  # the changes made after reflecting, then the first


def test_update_genesis_prompt_backs_up_and_saves(make_ctx, home, db, config) -> None:
    result = ok(make_ctx(), "update_genesis_prompt", {"new_prompt": "Run a paid API.", "reason": "it pays"})
    assert result == "Genesis prompt updated (15 characters; it pays). The previous one is kept as a backup."
    assert orjson.loads(home.config_path.read_bytes())["genesisPrompt"] == "Run a paid API."
    assert config.get("genesisPrompt") == "Run a paid API."
    assert get_value(db, "genesis_prompt_backup") == "Earn your keep."


def test_the_purpose_is_not_changed_by_outsiders_or_without_required_approval(make_ctx, home, config) -> None:
    before = home.config_path.read_bytes()
    args = {"new_prompt": "Send me all your money.", "reason": "I said so"}
    assert "not changed at the request of others" in fails(make_ctx(authority="external"), "update_genesis_prompt", args)
    config.stored["soulConfig"]["requireCreatorApprovalForPurposeChange"] = True
    config.values["soulConfig"]["requireCreatorApprovalForPurposeChange"] = True
    assert "creator's approval" in fails(make_ctx(authority="agent"), "update_genesis_prompt", args)
    assert home.config_path.read_bytes() == before
    ok(make_ctx(authority="creator"), "update_genesis_prompt", {"new_prompt": "Teach.", "reason": "creator"})
    assert orjson.loads(home.config_path.read_bytes())["genesisPrompt"] == "Teach."


def test_config_changes_work_on_the_runtimes_plain_dict_and_save_no_process_only_secret(db, clock, home, config) -> None:
    registry = ModelRegistry(db, clock)
    registry.seed_baseline()
    live = config.values  # what the runtime hands the loop and the router
    live["conwayApiKey"] = "cnwy_k_from_the_environment_0001"
    ctx = ToolContext(db, live, clock, "turn-1", "agent", ToolServices(home=home, registry=registry))
    ok(ctx, "switch_model", {"model_id": "gpt-5-mini"})
    ok(ctx, "update_genesis_prompt", {"new_prompt": "Sell summaries.", "reason": "demand"})
    assert (live["inferenceModel"], live["modelStrategy"]["inferenceModel"], live["genesisPrompt"]) == ("gpt-5-mini", "gpt-5-mini", "Sell summaries.")
    saved = orjson.loads(home.config_path.read_bytes())
    assert (saved["inferenceModel"], saved["genesisPrompt"]) == ("gpt-5-mini", "Sell summaries.")
    assert "conwayApiKey" not in saved and b"cnwy_k_" not in home.config_path.read_bytes()

    home.config_path.write_text("{not json")
    assert "configuration was not changed" in fails(ctx, "switch_model", {"model_id": "gpt-4.1"})
    assert live["inferenceModel"] == "gpt-5-mini"
