"""The policy engine on a real state.db, a real home and a real workspace with real symlinks.

Tables of (tool, arguments, authority) -> expected reason code, per rule family,
with the bypass attempts a model (or whoever writes its messages) would try.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import apsw
import pytest

import automaton_min.agent.policy as policy_package
from automaton_min.agent.policy import PolicyEngine, default_rules
from automaton_min.agent.policy.engine import args_hash
from automaton_min.agent.policy.types import (ALLOWED, DB_UNAVAILABLE, RULE_ERROR, Applies, PolicyRequest, Rule, deny,
                                              quarantine, tools)
from automaton_min.agent.policy.rules_command import kernel_confines
from automaton_min.agent.tools.base import ToolSpec
from automaton_min.clock import DAY_MS, HOUR_MS, to_iso
from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.confine.client import ConfinedSandbox, UnconfinedSandbox
from automaton_min.confine.protected import HOME_PROTECTED, HOME_SECRETS
from automaton_min.conway.client import ConwayClient
from automaton_min.runtime.sandboxes import RemoteSandbox
from automaton_min.conway.client import BALANCE_KEY
from automaton_min.store.kv import set_value
from automaton_min.treasury.spend import SpendTracker

ADDRESS = "0x" + "ab" * 20
CREATOR = "0x" + "c0" * 20
STRANGER = "0x" + "5e" * 20
OBJECT = {"type": "object", "properties": {}}


def spec(name: str, category: str, risk: str) -> ToolSpec:
    return ToolSpec(name, name, OBJECT, category, risk)  # type: ignore[arg-type]


# The reference's categories and risk levels.
SPECS = {s.name: s for s in (
    spec("exec", "vm", "caution"),
    spec("read_file", "vm", "safe"),
    spec("write_file", "vm", "caution"),
    spec("expose_port", "vm", "caution"),
    spec("remove_port", "vm", "caution"),
    spec("modify_heartbeat", "self_mod", "caution"),
    spec("update_genesis_prompt", "self_mod", "dangerous"),
    spec("update_soul", "self_mod", "caution"),
    spec("transfer_credits", "financial", "dangerous"),
    spec("topup_credits", "financial", "dangerous"),
    spec("x402_fetch", "financial", "dangerous"),
    spec("send_message", "conway", "caution"),
    spec("check_credits", "conway", "safe"),
    spec("create_sandbox", "conway", "caution"),
    spec("distress_signal", "survival", "caution"),
    spec("dangerous_tool", "conway", "dangerous"),  # no such tool: one that declares its risk only
    spec("summarize", "inference", "safe"),
)}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("hello\n")
    return path


@pytest.fixture
def runtime_files(db, home) -> None:
    """The home as a set-up agent has it (the db fixture created the home and state.db)."""
    for name, text in (("wallet.json", '{"privateKey":"0x01"}'), ("config.json", '{"apiKey":"k"}'),
                       ("automaton.json", "{}"), ("constitution.md", "laws"), ("SOUL.md", "me")):
        (home.root / name).write_text(text)


@pytest.fixture
def balance() -> dict[str, int | None]:
    return {"cents": 100_000}


@pytest.fixture
def config() -> dict:
    return {"creatorAddress": CREATOR, "treasuryPolicy": {**DEFAULT_TREASURY_POLICY, "knownPayees": [ADDRESS]}}


@pytest.fixture
def engine(db, home, clock, workspace, runtime_files, config, balance) -> PolicyEngine:
    return PolicyEngine(default_rules(), db=db, config=config, home=home, workspace=workspace, now=clock,
                        balance_cents=lambda: balance["cents"])


def decide(engine: PolicyEngine, tool: str, arguments: dict | None = None, *, authority: str = "agent",
           turn: str | None = "turn-1", calls: tuple[str, ...] = ()):
    return engine.evaluate(PolicyRequest(SPECS[tool], arguments or {}, authority, turn, calls))  # type: ignore[arg-type]


def code_of(engine: PolicyEngine, tool: str, arguments: dict | None = None, **options) -> str:
    return decide(engine, tool, arguments, **options).reason_code


def rows(db) -> list[tuple]:
    return db.query("SELECT turn_id, tool_name, tool_args_hash, risk_level, decision, rules_evaluated, rules_triggered,"
                    " reason, created_at FROM policy_decisions ORDER BY rowid")


# --------------------------------------------------------------------------- validation


VALIDATION = [
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": 100}, ALLOWED),
    ("transfer_credits", {"to_address": "0x123", "amount_cents": 100}, "VALIDATION_FAILED"),
    ("transfer_credits", {"to_address": "So1anaAddre55xxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "amount_cents": 100}, "VALIDATION_FAILED"),
    ("transfer_credits", {"amount_cents": 100}, "VALIDATION_FAILED"),
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": 0}, "VALIDATION_FAILED"),
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": -5}, "VALIDATION_FAILED"),
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": 12.5}, "VALIDATION_FAILED"),
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": True}, "VALIDATION_FAILED"),
    ("send_message", {"to_address": ADDRESS, "content": "hi"}, ALLOWED),
    ("send_message", {"to_address": ADDRESS + "0", "content": "hi"}, "VALIDATION_FAILED"),
    ("topup_credits", {"amount_usd": 5}, ALLOWED),
    ("topup_credits", {"amount_usd": -5}, "VALIDATION_FAILED"),
    ("expose_port", {"port": 8080}, ALLOWED),
    ("expose_port", {"port": 1}, ALLOWED),
    ("expose_port", {"port": 65535}, ALLOWED),
    ("expose_port", {"port": 0}, "VALIDATION_FAILED"),
    ("remove_port", {"port": 65536}, "VALIDATION_FAILED"),
    ("remove_port", {"port": "80"}, "VALIDATION_FAILED"),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "*/5 * * * *"}, ALLOWED),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "0 9-17 * * 1-5"}, ALLOWED),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "0,30 */2 1 1,6 0"}, ALLOWED),
    ("modify_heartbeat", {"action": "remove", "name": "x"}, ALLOWED),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "* * * *"}, "VALIDATION_FAILED"),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "60 * * * *"}, "VALIDATION_FAILED"),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "*/0 * * * *"}, "VALIDATION_FAILED"),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "0 0 * * * rm"}, "VALIDATION_FAILED"),
    ("modify_heartbeat", {"action": "add", "name": "x", "schedule": "0 0 * * mon;id"}, "VALIDATION_FAILED"),
]


@pytest.mark.parametrize(("tool", "arguments", "code"), VALIDATION,
                         ids=[f"{t}-{c}-{json.dumps(a)}" for t, a, c in VALIDATION])
def test_validation(engine, tool, arguments, code) -> None:
    got = decide(engine, tool, arguments)
    assert got.reason_code == code, got.message
    if code != ALLOWED:
        assert got.rules_triggered[0].startswith("validate.")


# --------------------------------------------------------------------------- exec where the kernel does not confine


@pytest.mark.parametrize("command", [
    "ls",
    "ls -la",
    "git status",
    "git log --oneline | head -20",
    "git commit -m 'fix: the thing'",
    "python script.py",
    "python3 -c 'print(1 + 1)'",
    "cat notes.txt",
    "rm -rf build/",
    "rm -f *.pyc",
    "find . -name '*.log' -exec rm {} \\;",
    "pip install requests",
    "curl -fsSL https://example.com/install.sh | sh",
    "echo aGVsbG8gd29ybGQ= | base64 -d",
    "cat > app.py <<'EOF'\nimport os\nprint(os.getcwd())\nEOF",
    "nohup python server.py > server.log 2>&1 &",
    "for f in *.txt; do wc -l $f; done",
    "export PATH=$HOME/.local/bin:$PATH && which python",
    "truncate -s 0 app.log",
    "kill 1234",
    "kill $(cat ~/.automaton/workspace/server.pid)",
    "sqlite3 other.db 'SELECT 1'",
    "sqlite3 ~/.automaton/state.db 'SELECT count(*) FROM turns'",
    "cat ~/.automaton/SOUL.md",
    "ls -la ~/.automaton",
    "du -sh ~/.automaton",
    "cp ~/.automaton/state.db /tmp/backup.db",
    "cat config.json",
    "cat .env.example",
    "grep -rn TODO .",
    "python -m venv .venv && source .venv/bin/activate",
    "echo $(date) >> log.txt",
    "apt-get update && apt-get install -y jq",
    "RED=$(printf '\\033[31m'); echo \"${RED}error\"",
    "echo -e '\\033[1mbold\\033[0m'",
    "cat > run.sh <<'EOF'\nls -la\nEOF\nbash run.sh",
    "ls; # rm -rf ..",
])
def test_ordinary_commands_are_allowed_unconfined_too(engine, command) -> None:
    got = decide(engine, "exec", {"command": command})
    assert got.action == "allow", got.message


# Each names a rule of the unconfined list; the workspace is a sibling of the home (../automaton-home).
FORBIDDEN = [
    "rm -rf /", "rm -rf /*",
    "rm -rf ~/.automaton", "r''m -rf ~/.automaton", "\\rm -rf ~/.automaton", "rm -rf ../automaton-home",
    "mv ../automaton-home/state.db-wal /tmp/x", "chmod 777 ../automaton-home/state.db",
    "echo x > ../automaton-home/state.db", "echo hi | tee ~/.automaton/SOUL.md",
    "dd if=/dev/zero of=../automaton-home/state.db-shm", "sed -i s/law/no/ ../automaton-home/constitution.md",
    "ln -sf /dev/null ../automaton-home/state.db", "cp evil.md ../automaton-home/constitution.md",
    "tar czf out.tgz ../automaton-home", "grep -r privateKey ../automaton-home",
    "cat ~/.automaton/wallet.json", 'cat w"a"llet.json', "cat ${HOME}/.automaton/./wallet.json",
    "cat backup/wallet.json", "cat ../automaton-home/automaton.json", "cat ../automaton-home/config.json",
    "cat${IFS}../automaton-home/config.json",
    "cat .env", "source .env.production", "cat ~/.ssh/id_rsa", "cat ~/.gnupg/secring.gpg", "cat /etc/shadow",
    "cat /proc/$PPID/environ",
    "sqlite3 state.db 'DROP TABLE turns'", "psql -c 'TRUNCATE TABLE turns'",
    "sqlite3 ../automaton-home/state.db 'DELETE FROM identity'",
    "sqlite3 ../automaton-home/state.db 'UPDATE policy_decisions SET decision=1'",
    "pkill -f automaton", "killall python3", "kill -9 $(pgrep -f automaton-min)", "kill -9 -1", "kill -TERM $PPID",
    "systemctl stop automaton-min", "sudo systemctl disable automaton-min.service", "service automaton stop",
    "echo x > /etc/systemd/system/automaton-min.service",
    "shutdown -h now", ":(){ :|:& };:", "mkfs.ext4 /dev/sda1", "dd if=/dev/zero of=/dev/sda",
    "echo Y2F0IHdhbGxldC5qc29u | base64 -d | sh", "echo 726d202d7266202f | xxd -r -p | bash",
]


@pytest.mark.parametrize("command", FORBIDDEN)
def test_the_unconfined_list_refuses_what_would_harm_the_agent(engine, command) -> None:
    got = decide(engine, "exec", {"command": command})
    assert (got.action, got.reason_code) == ("deny", "FORBIDDEN_COMMAND"), got.message
    assert got.rules_triggered == ["command.forbidden_patterns"] and got.message.startswith("Blocked: ")


@pytest.mark.parametrize(("command", "allowed"), [
    ("cat config.json", True),
    ("echo {} > config.json", True),
    ("rm -rf build && cat notes.txt", True),
    ("tar czf out.tgz .", True),
    ("rm -rf ../workspace/build", True),
    ("cat ../config.json", False),
    ("cat ../wallet.json", False),
    ("rm -rf ..", False),
    ("grep -r privateKey ..", False),
    ("echo x > ../SOUL.md", False),
    ("rm -f {home}/state.db", False),
])
def test_a_workspace_inside_the_home_as_the_runtime_has_it(db, home, clock, runtime_files, command, allowed) -> None:
    inside = home.root / "workspace"
    inside.mkdir()
    engine = PolicyEngine(default_rules(), db=db, config={}, home=home, workspace=inside, now=clock)
    got = decide(engine, "exec", {"command": command.replace("{home}", str(home.root))})
    assert got.allowed is allowed, got.message


def test_where_the_kernel_confines_the_command_rule_refuses_nothing(db, home, clock, workspace, runtime_files) -> None:
    """The kernel is the guard there (tests/e2e/test_theft_corpus.py); a command that is not text is still refused."""
    engine = PolicyEngine(default_rules(), db=db, config={}, home=home, workspace=workspace, now=clock,
                          commands_confined=True)
    for command in FORBIDDEN:
        assert decide(engine, "exec", {"command": command}).allowed, command
    assert decide(engine, "exec", {"command": "ls"}, authority="external").allowed
    assert code_of(engine, "exec", {"command": ["rm", "-rf", "/"]}) == "VALIDATION_FAILED"


def test_which_sandboxes_the_kernel_confines(tmp_path) -> None:
    """Confined locally, or a Conway sandbox on another machine: yes; unconfined, or the daemon's own sandbox: no."""
    assert kernel_confines(ConfinedSandbox(tmp_path, tmp_path / "ws", "landlock"))
    assert not kernel_confines(UnconfinedSandbox(tmp_path / "ws"))
    remote = RemoteSandbox(ConwayClient("http://127.0.0.1:9", "key"), "sbx-1")
    assert kernel_confines(remote) and kernel_confines(remote, "sbx-2")
    assert not kernel_confines(remote, "sbx-1")


# --------------------------------------------------------------------------- path protection


@pytest.mark.parametrize(("tool", "path", "code"), [
    ("write_file", "notes.txt", ALLOWED),
    ("write_file", "src/new/module.py", ALLOWED),
    ("write_file", "~/project/README.md", ALLOWED),
    ("write_file", "config.json", ALLOWED),  # a project's own config.json, not the API key
    ("write_file", "{home}/SOUL.md", "PROTECTED_FILE"),  # update_soul changes it
    ("write_file", "{home}/skills/x/SKILL.md", "PROTECTED_FILE"),
    ("write_file", "{home}/bin/automaton-min", "PROTECTED_FILE"),  # the service's binary: updates only
    ("write_file", "~/.automaton/heartbeat.yml", "PROTECTED_FILE"),
    ("write_file", "{home}/wallet.json", "PROTECTED_FILE"),
    ("write_file", "{home}/automaton.json", "PROTECTED_FILE"),
    ("write_file", "{home}/config.json", "PROTECTED_FILE"),
    ("write_file", "{home}/state.db", "PROTECTED_FILE"),
    ("write_file", "{home}/state.db-wal", "PROTECTED_FILE"),
    ("write_file", "{home}/state.db-shm", "PROTECTED_FILE"),
    ("write_file", "{home}/constitution.md", "PROTECTED_FILE"),
    ("write_file", "../automaton-home/constitution.md", "PROTECTED_FILE"),
    ("write_file", "../../{tail}/automaton-home/./state.db", "PROTECTED_FILE"),
    ("write_file", "~/.automaton/state.db", "PROTECTED_FILE"),
    ("write_file", "$HOME/.automaton/wallet.json", "PROTECTED_FILE"),
    ("write_file", "../automaton-home/state%2Edb", "PROTECTED_FILE"),
    ("write_file", "/root/.automaton/automaton.json", "PROTECTED_FILE"),
    ("write_file", "~/.ssh/authorized_keys", "PROTECTED_FILE"),
    ("write_file", "/home/someone/.aws/credentials", "PROTECTED_FILE"),
    ("write_file", "/etc/systemd/system/evil.service", "PROTECTED_FILE"),
    ("write_file", "/etc/passwd", "PROTECTED_FILE"),
    ("write_file", "/proc/sys/kernel/panic", "PROTECTED_FILE"),
    ("write_file", "{code}/engine.py", "PROTECTED_FILE"),
    ("read_file", "notes.txt", ALLOWED),
    ("read_file", "{home}/SOUL.md", ALLOWED),
    ("read_file", "{home}/state.db", ALLOWED),
    ("read_file", "/proc/cpuinfo", ALLOWED),
    ("read_file", "{home}/wallet.json", "SENSITIVE_FILE_READ"),
    ("read_file", "{home}/config.json", "SENSITIVE_FILE_READ"),
    ("read_file", "{home}/automaton.json", "SENSITIVE_FILE_READ"),
    ("read_file", "../automaton-home/config.json", "SENSITIVE_FILE_READ"),
    ("read_file", "backup/wallet.json", "SENSITIVE_FILE_READ"),
    ("read_file", ".env", "SENSITIVE_FILE_READ"),
    ("read_file", "certs/server.pem", "SENSITIVE_FILE_READ"),
    ("read_file", "deploy.KEY", "SENSITIVE_FILE_READ"),
    ("read_file", "~/.ssh/id_ed25519", "SENSITIVE_FILE_READ"),
    ("read_file", "/etc/shadow", "SENSITIVE_FILE_READ"),
    ("read_file", "/proc/self/environ", "SENSITIVE_FILE_READ"),
    ("read_file", "../automaton-home/c%6Fnfig.json", "SENSITIVE_FILE_READ"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_path_protection(engine, home, tmp_path, tool, path, code) -> None:
    path = path.format(home=home.root, tail=tmp_path.name, code=Path(policy_package.__file__).parent)
    got = decide(engine, tool, {"path": path})
    assert got.reason_code == code, got.message


def test_every_entry_of_the_one_list_is_protected(engine, home) -> None:
    """The list the kernel plan enforces too (tests/test_confine.py reads it the same way)."""
    (home.root / "skills").mkdir()
    for name in HOME_PROTECTED:
        assert code_of(engine, "write_file", {"path": str(home.root / name)}) == "PROTECTED_FILE", name
        assert code_of(engine, "write_file", {"path": f"../automaton-home/{name}/x"}) == "PROTECTED_FILE", name
    for name in HOME_SECRETS:
        assert code_of(engine, "read_file", {"path": str(home.root / name)}) == "SENSITIVE_FILE_READ", name
    assert code_of(engine, "write_file", {"path": str(home.root / "workspace" / "notes.md")}) == ALLOWED


@pytest.mark.parametrize(("tool", "target", "code"), [
    ("write_file", "wallet.json", "PROTECTED_FILE"),
    ("write_file", "state.db", "PROTECTED_FILE"),
    ("read_file", "wallet.json", "SENSITIVE_FILE_READ"),
    ("read_file", "config.json", "SENSITIVE_FILE_READ"),
    ("read_file", "SOUL.md", ALLOWED),
    ("write_file", "SOUL.md", "PROTECTED_FILE"),
])
def test_symlinks_are_followed_for_file_tools(engine, home, workspace, tool, target, code) -> None:
    (workspace / "link").symlink_to(home.root / target)
    assert code_of(engine, tool, {"path": "link"}) == code
    assert code_of(engine, tool, {"path": "./sub/../link"}) == code


def test_a_link_to_a_protected_file_that_does_not_exist_yet(engine, home, workspace) -> None:
    (home.root / "config.json").unlink()  # not provisioned yet
    (workspace / "dangling").symlink_to(home.root / "config.json")
    (workspace / "homelink").symlink_to(home.root)
    assert code_of(engine, "write_file", {"path": "dangling"}) == "PROTECTED_FILE"
    assert code_of(engine, "write_file", {"path": "homelink/sub/../config.json"}) == "PROTECTED_FILE"
    assert code_of(engine, "write_file", {"path": "homelink/new-notes.md"}) == ALLOWED


def test_a_configured_database_path_is_protected_too(db, home, clock, workspace, runtime_files, tmp_path) -> None:
    elsewhere = tmp_path / "data" / "agent.db"
    engine = PolicyEngine(default_rules(), db=db, config={"dbPath": str(elsewhere)}, home=home, workspace=workspace, now=clock)
    for path in (elsewhere, f"{elsewhere}-wal", f"{elsewhere}-shm"):
        assert code_of(engine, "write_file", {"path": str(path)}) == "PROTECTED_FILE"
    assert code_of(engine, "write_file", {"path": str(tmp_path / "data" / "other.db")}) == ALLOWED


# --------------------------------------------------------------------------- financial


def transfer(engine, amount: int, **options):
    return decide(engine, "transfer_credits", {"to_address": ADDRESS, "amount_cents": amount}, **options)


def test_transfers_within_the_limits_are_allowed(engine) -> None:
    got = transfer(engine, 1000)
    assert got.action == "allow"
    assert "financial.transfer_limits" in got.rules_evaluated and "financial.require_confirmation" in got.rules_evaluated


@pytest.mark.parametrize(("amount", "setup", "code"), [
    (5001, {}, "SPEND_LIMIT_EXCEEDED"),
    (100, {"calls": ("exec", "transfer_credits", "transfer_credits")}, "TURN_TRANSFER_LIMIT"),
    (100, {"spent_hour": 9_950}, "SPEND_LIMIT_EXCEEDED"),
    (100, {"spent_day": 24_950}, "SPEND_LIMIT_EXCEEDED"),
    (500, {"balance": 1_400}, "RESERVE_LIMIT"),
    (500, {"balance": None}, "RESERVE_LIMIT"),
    (500, {"policy": {"transferCooldownMs": 60_000}, "spent_hour": 10}, "TRANSFER_COOLDOWN"),
], ids=["per-transfer-cap", "third-transfer-in-a-turn", "hourly-cap", "daily-cap", "reserve", "unknown-balance", "cooldown"])
def test_transfer_limits_come_from_the_spend_tracker(engine, db, clock, config, balance, amount, setup, code) -> None:
    config["treasuryPolicy"].update(setup.get("policy", {}))
    spend = SpendTracker(db, clock)
    if "spent_day" in setup:
        clock.advance(-2 * HOUR_MS)
        spend.record("transfer", setup["spent_day"], "transfer_credits")
        clock.advance(2 * HOUR_MS)
    if "spent_hour" in setup:
        spend.record("transfer", setup["spent_hour"], "transfer_credits")
    if "balance" in setup:
        balance["cents"] = setup["balance"]
    got = transfer(engine, amount, calls=setup.get("calls", ()))
    assert (got.action, got.reason_code) == ("deny", code), got.message


def test_two_transfers_a_turn_are_fine_the_third_is_not(engine) -> None:
    assert transfer(engine, 100, calls=()).action == "allow"
    assert transfer(engine, 100, calls=("transfer_credits",)).action == "allow"
    assert transfer(engine, 100, calls=("transfer_credits", "transfer_credits")).reason_code == "TURN_TRANSFER_LIMIT"


def test_without_a_balance_provider_the_last_known_balance_is_used(db, home, clock, workspace, runtime_files) -> None:
    config = {"treasuryPolicy": {**DEFAULT_TREASURY_POLICY, "knownPayees": [ADDRESS]}}
    engine = PolicyEngine(default_rules(), db=db, config=config, home=home, workspace=workspace, now=clock)
    assert transfer(engine, 500).reason_code == "RESERVE_LIMIT"  # nothing known yet: fail closed
    set_value(db, BALANCE_KEY, json.dumps({"cents": 50_000, "at": to_iso(clock())}), clock())
    assert transfer(engine, 500).action == "allow"


def test_large_transfers_are_quarantined_and_a_later_deny_still_wins(engine) -> None:
    got = transfer(engine, 1001)
    assert (got.action, got.reason_code) == ("quarantine", "CONFIRMATION_REQUIRED")
    assert not got.allowed and got.rules_triggered == ["financial.require_confirmation"]
    assert transfer(engine, 1000).action == "allow"  # the threshold itself is fine
    # A quarantine (priority 500) does not stop the rules after it: the hourly cap on dangerous tools (600) still denies.
    for _ in range(59):
        assert transfer(engine, 100).action == "allow"
    got = transfer(engine, 1001)
    assert (got.action, got.reason_code) == ("deny", "RATE_LIMIT_TOOL")
    assert got.rules_triggered == ["financial.require_confirmation", "rate.dangerous_hourly"]


@pytest.mark.parametrize("authority", ["agent", "creator"])
def test_an_unknown_payee_is_quarantined_whatever_the_amount_and_the_authority(engine, authority) -> None:
    got = decide(engine, "transfer_credits", {"to_address": STRANGER, "amount_cents": 1}, authority=authority)
    assert (got.action, got.reason_code) == ("quarantine", "UNKNOWN_PAYEE")
    assert got.message.startswith(f"{STRANGER} is not a known payee") and "financial.known_payee" in got.rules_triggered
    assert decide(engine, "transfer_credits", {"to_address": CREATOR, "amount_cents": 1}, authority=authority).allowed


def test_a_stranger_asking_is_refused_before_the_payee_is_looked_at(engine) -> None:
    got = decide(engine, "transfer_credits", {"to_address": STRANGER, "amount_cents": 1}, authority="external")
    assert (got.action, got.reason_code) == ("deny", "EXTERNAL_DANGEROUS_TOOL")


def test_a_payee_the_creator_added_by_message_is_known_until_removed(engine, db, clock) -> None:
    from automaton_min.treasury.commands import parse_payee
    from automaton_min.treasury.payees import apply_command

    assert parse_payee(f"  payee add {STRANGER.upper().replace('0X', '0x')} ") == ("add", STRANGER)
    assert parse_payee(f"please payee add {STRANGER}") is None
    assert apply_command(db, ("add", STRANGER), message_id="m1", now_ms=clock()) == f"{STRANGER} is now a known payee"
    assert transfer_to(engine, STRANGER).allowed
    assert "no longer" in apply_command(db, ("remove", STRANGER), message_id="m2", now_ms=clock())
    assert transfer_to(engine, STRANGER).reason_code == "UNKNOWN_PAYEE"
    assert "treasuryPolicy.knownPayees" in apply_command(db, ("remove", ADDRESS), message_id="m3", now_ms=clock())


def transfer_to(engine, to: str):
    return decide(engine, "transfer_credits", {"to_address": to, "amount_cents": 100})


@pytest.mark.parametrize(("url", "domains", "code"), [
    ("https://conway.tech/paid", ["conway.tech"], ALLOWED),
    ("https://api.conway.tech/v1/x?q=1", ["conway.tech"], ALLOWED),
    ("https://CONWAY.TECH./x", ["conway.tech"], ALLOWED),
    ("https://evilconway.tech/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("https://8080-sbx1.life.conway.tech/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),  # a stranger's sandbox
    ("https://8080-sbx1.life.conway.tech/x", ["conway.tech", "8080-sbx1.life.conway.tech"], ALLOWED),
    ("https://8080-sbx2.life.conway.tech/x", ["conway.tech", "8080-sbx1.life.conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("https://8080-sbx2.life.conway.tech/x", ["life.conway.tech"], ALLOWED),
    ("https://conway.tech.evil.com/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("https://conway.tech@evil.com/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("https://example.com/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("https://conway.tech/x", [], "DOMAIN_NOT_ALLOWED"),
    ("ftp://conway.tech/x", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
    ("not a url", ["conway.tech"], "DOMAIN_NOT_ALLOWED"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_x402_domain_allowlist(engine, config, url, domains, code) -> None:
    config["treasuryPolicy"]["x402AllowedDomains"] = domains
    assert code_of(engine, "x402_fetch", {"url": url}) == code


def test_x402_payment_cap_and_used_up_budget(engine, db, clock) -> None:
    url = {"url": "https://conway.tech/x"}
    assert code_of(engine, "x402_fetch", {**url, "max_payment_cents": 100}) == ALLOWED
    assert code_of(engine, "x402_fetch", {**url, "max_payment_cents": 101}) == "SPEND_LIMIT_EXCEEDED"
    SpendTracker(db, clock).record("x402", 999, "x402_fetch")
    assert code_of(engine, "x402_fetch", url) == ALLOWED
    SpendTracker(db, clock).record("x402", 1, "x402_fetch")  # 1000 = 10 x maxX402PaymentCents
    assert code_of(engine, "x402_fetch", url) == "SPEND_LIMIT_EXCEEDED"
    clock.advance(HOUR_MS + 1)
    assert code_of(engine, "x402_fetch", url) == ALLOWED


def test_tools_that_run_inference_stop_when_the_budget_is_spent(engine, db, clock) -> None:
    assert code_of(engine, "summarize") == ALLOWED
    SpendTracker(db, clock).record("inference", 50_000, "router")
    assert code_of(engine, "summarize") == "INFERENCE_BUDGET_EXCEEDED"


# --------------------------------------------------------------------------- authority


AUTHORITY_MATRIX = [
    # tool, arguments, creator, agent, external
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": 100}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("update_genesis_prompt", {"new_prompt": "x", "reason": "y"}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("x402_fetch", {"url": "https://conway.tech/x"}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("topup_credits", {"amount_usd": 5}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("create_sandbox", {}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("distress_signal", {}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("update_soul", {"content": "new me"}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("modify_heartbeat", {"action": "remove", "name": "x"}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),
    ("dangerous_tool", {}, ALLOWED, ALLOWED, "EXTERNAL_DANGEROUS_TOOL"),  # by its declared risk
    ("check_credits", {}, ALLOWED, ALLOWED, ALLOWED),
    ("send_message", {"to_address": ADDRESS, "content": "hi"}, ALLOWED, ALLOWED, ALLOWED),
    ("exec", {"command": "ls"}, ALLOWED, ALLOWED, "EXTERNAL_UNCONFINED_EXEC"),  # unconfined here; confined: below
    ("read_file", {"path": "notes.txt"}, ALLOWED, ALLOWED, ALLOWED),
    ("write_file", {"path": "reply.txt"}, ALLOWED, ALLOWED, ALLOWED),
    # the agent's own files are protected for everyone, whoever asks (update_soul and modify_heartbeat change two)
    ("write_file", {"path": "{home}/SOUL.md"}, "PROTECTED_FILE", "PROTECTED_FILE", "PROTECTED_FILE"),
    ("write_file", {"path": "{home}/heartbeat.yml"}, "PROTECTED_FILE", "PROTECTED_FILE", "PROTECTED_FILE"),
    ("write_file", {"path": "../automaton-home/skills/x/SKILL.md"}, "PROTECTED_FILE", "PROTECTED_FILE",
     "PROTECTED_FILE"),
    ("exec", {"command": "echo evil > ../automaton-home/skills/x/SKILL.md"}, "FORBIDDEN_COMMAND", "FORBIDDEN_COMMAND",
     "FORBIDDEN_COMMAND"),
    ("write_file", {"path": "{home}/constitution.md"}, "PROTECTED_FILE", "PROTECTED_FILE", "PROTECTED_FILE"),
    ("exec", {"command": "cat ~/.automaton/wallet.json"}, "FORBIDDEN_COMMAND", "FORBIDDEN_COMMAND", "FORBIDDEN_COMMAND"),
    ("transfer_credits", {"to_address": ADDRESS, "amount_cents": 6000}, "SPEND_LIMIT_EXCEEDED", "SPEND_LIMIT_EXCEEDED",
     "EXTERNAL_DANGEROUS_TOOL"),
]


@pytest.mark.parametrize(("tool", "arguments", "creator", "agent", "external"), AUTHORITY_MATRIX,
                         ids=[f"{row[0]}-{i}" for i, row in enumerate(AUTHORITY_MATRIX)])
def test_authority_matrix(engine, home, clock, tool, arguments, creator, agent, external) -> None:
    arguments = {k: v.format(home=home.root) if isinstance(v, str) else v for k, v in arguments.items()}
    got = {}
    for who in ("creator", "agent", "external"):
        got[who] = code_of(engine, tool, arguments, authority=who)
        clock.advance(DAY_MS + 1)  # each asks afresh: no rate limit carries over
    assert got == {"creator": creator, "agent": agent, "external": external}


def test_an_unknown_authority_is_treated_as_external(engine) -> None:
    assert code_of(engine, "transfer_credits", {"to_address": ADDRESS, "amount_cents": 100},
                   authority="heartbeat") == "EXTERNAL_DANGEROUS_TOOL"


# --------------------------------------------------------------------------- rate limits


def test_the_genesis_prompt_changes_at_most_once_a_day(engine, clock) -> None:
    args = {"new_prompt": "x", "reason": "y"}
    assert code_of(engine, "update_genesis_prompt", args) == ALLOWED
    clock.advance(DAY_MS)  # the window includes its edge: exactly 24 h later is still "within a day"
    assert code_of(engine, "update_genesis_prompt", args) == "RATE_LIMIT_GENESIS"
    clock.advance(1)
    assert code_of(engine, "update_genesis_prompt", args) == ALLOWED


def test_denied_calls_do_not_use_up_a_rate_limit(engine) -> None:
    args = {"new_prompt": "x", "reason": "y"}
    assert code_of(engine, "update_genesis_prompt", args, authority="external") == "EXTERNAL_DANGEROUS_TOOL"
    assert code_of(engine, "update_genesis_prompt", args) == ALLOWED


def test_dangerous_tools_are_capped_per_hour(engine, clock) -> None:
    for _ in range(60):
        assert code_of(engine, "dangerous_tool") == ALLOWED
    assert code_of(engine, "dangerous_tool") == "RATE_LIMIT_TOOL"
    assert code_of(engine, "check_credits") == ALLOWED  # other tools are not affected
    clock.advance(HOUR_MS + 1)
    assert code_of(engine, "dangerous_tool") == ALLOWED


class BrokenDb:
    """A database that fails every statement, as a locked or vanished file would."""

    def execute(self, *args, **kwargs):
        raise apsw.BusyError("database is locked")

    scalar = query = query_one = execute


def test_rate_limits_and_recording_fail_closed_without_a_database(home, clock, workspace, runtime_files) -> None:
    for db in (None, BrokenDb()):
        engine = PolicyEngine(default_rules(), db=db, config=None, home=home, workspace=workspace, now=clock,
                              balance_cents=lambda: 100_000)
        got = decide(engine, "update_genesis_prompt", {"new_prompt": "x", "reason": "y"})
        assert (got.action, got.reason_code) == ("deny", DB_UNAVAILABLE)
        assert {"rate.genesis_prompt_daily", "authority.external_goal"} & set(got.rules_triggered)
        # A safe call passes every rule but cannot be recorded: refused as well.
        got = decide(engine, "check_credits")
        assert (got.action, got.reason_code, got.rules_triggered) == ("deny", DB_UNAVAILABLE, [])


# --------------------------------------------------------------------------- the engine itself


def recording_rule(rule_id: str, priority: int, answer, seen: list[str], applies: Applies | None = None) -> Rule:
    def check(request, env):
        seen.append(rule_id)
        return answer
    return Rule(rule_id, priority, applies or Applies(every=True), check)


def make(rules, db, home, clock, workspace) -> PolicyEngine:
    return PolicyEngine(rules, db=db, config=None, home=home, workspace=workspace, now=clock)


def test_rules_run_by_priority_and_the_first_deny_stops_them(db, home, clock, workspace) -> None:
    seen: list[str] = []
    engine = make([
        recording_rule("c.after", 300, deny("THIRD", "never reached"), seen),
        recording_rule("a.first", 100, None, seen),
        recording_rule("b.denies", 200, deny("SECOND", "no"), seen),
        recording_rule("a.tie", 100, None, seen),
    ], db, home, clock, workspace)
    got = decide(engine, "check_credits")
    assert seen == ["a.first", "a.tie", "b.denies"]
    assert (got.action, got.reason_code, got.message) == ("deny", "SECOND", "no")
    assert got.rules_evaluated == ["a.first", "a.tie", "b.denies"] and got.rules_triggered == ["b.denies"]


def test_a_quarantine_is_kept_unless_a_later_rule_denies(db, home, clock, workspace) -> None:
    seen: list[str] = []
    held = make([recording_rule("q", 100, quarantine("HOLD", "wait"), seen),
                 recording_rule("q2", 150, quarantine("HOLD2", "wait more"), seen),
                 recording_rule("ok", 200, None, seen)], db, home, clock, workspace)
    got = decide(held, "check_credits")
    assert (got.action, got.reason_code, got.rules_triggered) == ("quarantine", "HOLD", ["q", "q2"])
    assert held.authorize(SPECS["check_credits"], {}, "agent", "t1").startswith("HOLD: wait")
    denied = make([recording_rule("q", 100, quarantine("HOLD", "wait"), seen),
                   recording_rule("d", 200, deny("NO", "no"), seen)], db, home, clock, workspace)
    assert decide(denied, "check_credits").reason_code == "NO"


def test_rules_apply_only_to_what_they_declare(db, home, clock, workspace) -> None:
    seen: list[str] = []
    engine = make([
        recording_rule("by_name", 100, None, seen, tools("exec")),
        recording_rule("by_category", 100, None, seen, Applies(categories=frozenset({"financial"}))),
        recording_rule("by_risk", 100, None, seen, Applies(risks=frozenset({"dangerous"}))),
    ], db, home, clock, workspace)
    assert decide(engine, "check_credits").rules_evaluated == []
    assert decide(engine, "exec").rules_evaluated == ["by_name"]
    assert decide(engine, "transfer_credits").rules_evaluated == ["by_category", "by_risk"]
    assert decide(engine, "dangerous_tool").rules_evaluated == ["by_risk"]


def test_no_verdict_means_allowed(db, home, clock, workspace) -> None:
    got = decide(make([], db, home, clock, workspace), "exec", {"command": "anything"})
    assert (got.action, got.reason_code, got.message) == ("allow", ALLOWED, "All policy checks passed")
    assert make([], db, home, clock, workspace).authorize(SPECS["exec"], {}, "agent", "t") is None


def test_a_failing_rule_denies_and_a_malformed_answer_is_a_bug(db, home, clock, workspace) -> None:
    def explode(request, env):
        raise KeyError("surprise")
    got = decide(make([Rule("boom", 100, Applies(every=True), explode)], db, home, clock, workspace), "exec")
    assert (got.action, got.reason_code) == ("deny", RULE_ERROR)
    bad = make([Rule("bad", 100, Applies(every=True), lambda r, e: ("allow", "X", "y"))], db, home, clock, workspace)
    with pytest.raises(ValueError, match="bad"):
        decide(bad, "exec")
    with pytest.raises(ValueError, match="share an id"):
        make([Rule("x", 1, Applies(every=True), lambda r, e: None)] * 2, db, home, clock, workspace)


def test_rules_survive_arguments_of_the_wrong_type(engine) -> None:
    for tool, arguments in (("exec", {"command": ["rm", "-rf", "/"]}), ("read_file", {"path": 7}),
                            ("write_file", {"path": "a\x00b"}), ("x402_fetch", {"url": None})):
        got = decide(engine, tool, arguments)
        assert got.action == "deny", (tool, arguments)


# --------------------------------------------------------------------------- the record


def test_every_evaluation_writes_one_row_with_the_real_turn_id_and_the_args_hash(engine, db, clock) -> None:
    arguments = {"to_address": ADDRESS, "amount_cents": 1500, "reason": "thanks"}
    decide(engine, "check_credits", {}, turn="01TURNAAAA")
    decide(engine, "transfer_credits", arguments, turn="01TURNBBBB")
    clock.advance(1234)
    decide(engine, "exec", {"command": "cat ~/.automaton/wallet.json"}, turn="01TURNBBBB", authority="external")
    decide(engine, "transfer_credits", {**arguments, "to_address": "nope"}, turn=None)

    stored = rows(db)
    assert len(stored) == 4
    canonical = json.dumps(dict(sorted(arguments.items())), separators=(",", ":")).encode()
    assert stored[1] == (
        "01TURNBBBB", "transfer_credits", hashlib.sha256(canonical).hexdigest(), "dangerous", "quarantine",
        json.dumps(["validate.address_format", "validate.amount_positive", "authority.external_tool_restriction",
                    "authority.external_goal", "financial.transfer_limits", "financial.known_payee",
                    "financial.require_confirmation", "rate.dangerous_hourly"]),
        json.dumps(["financial.require_confirmation"]),
        "CONFIRMATION_REQUIRED: 1500 cents is above requireConfirmationAboveCents (1000); it needs the creator's confirmation",
        to_iso(clock() - 1234),
    )
    assert stored[0][:5] == ("01TURNAAAA", "check_credits", hashlib.sha256(b"{}").hexdigest(), "safe", "allow")
    assert stored[0][7] == "ALLOWED: All policy checks passed"
    assert stored[2][0] == "01TURNBBBB" and stored[2][4] == "deny" and stored[2][7].startswith("FORBIDDEN_COMMAND: Blocked:")
    assert stored[2][8] == to_iso(clock())
    assert stored[3][0] is None and stored[3][4] == "deny"
    ids = [r[0] for r in db.query("SELECT id FROM policy_decisions ORDER BY rowid")]
    assert len(set(ids)) == 4 and all(len(i) == 26 for i in ids)
    latencies = [r[0] for r in db.query("SELECT latency_ms FROM policy_decisions")]
    assert all(isinstance(ms, int) and ms >= 0 for ms in latencies)


def test_the_args_hash_ignores_key_order_and_sees_every_value() -> None:
    assert args_hash({"a": 1, "b": [1, 2]}) == args_hash({"b": [1, 2], "a": 1})
    assert args_hash({"a": 1}) != args_hash({"a": 2})
    assert args_hash({"s": "é"}) == hashlib.sha256('{"s":"é"}'.encode()).hexdigest()


def test_the_table_has_the_reference_columns_and_indexes(db) -> None:
    columns = [r[1] for r in db.query("PRAGMA table_info(policy_decisions)")]
    assert columns == ["id", "turn_id", "tool_name", "tool_args_hash", "risk_level", "decision", "rules_evaluated",
                       "rules_triggered", "reason", "latency_ms", "created_at"]
    indexes = {r[1] for r in db.query("PRAGMA index_list(policy_decisions)")}
    assert {"idx_policy_decisions_turn", "idx_policy_decisions_tool", "idx_policy_decisions_decision"} <= indexes
    with pytest.raises(apsw.ConstraintError):
        db.execute("INSERT INTO policy_decisions (id, tool_name, tool_args_hash, risk_level, decision, created_at)"
                   " VALUES ('x', 't', 'h', 'safe', 'maybe', 'now')")


def test_authorize_is_the_loops_hook(engine, db) -> None:
    assert engine.authorize(SPECS["exec"], {"command": "ls"}, "agent", "turn-9", ()) is None
    refusal = engine.authorize(SPECS["transfer_credits"], {"to_address": ADDRESS, "amount_cents": 100}, "agent", "turn-9",
                               ("transfer_credits", "transfer_credits"))
    assert refusal is not None and refusal.startswith("TURN_TRANSFER_LIMIT: ")
    assert [r[0] for r in rows(db)] == ["turn-9", "turn-9"]
