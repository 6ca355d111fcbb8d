"""A model that asks for the key in every way the tools allow, through the real agent (``build_agent``).

The exec theft corpus (tests/e2e/test_theft_corpus.py: cat, cp, base64, links, python, tar, od, dd, grep, find,
/proc of the daemon, scripts run later, sqlite) is not repeated here. This adds the other ways to ask: every
tool that reports on the agent itself (the "wallet" tools, the synopsis, the soul, memory, models, spending),
the agent's own program run from inside the sandbox (its CLI and its wallet loader against the home), the
environment through the shell and the interpreter, and a remembered "fact" that names the key. Nothing may
return key material or the daemon's environment, and the key must not reach the model, the log or state.db.
"""

from __future__ import annotations

from attack_kit import KeyWatch, capture_logs, finish, stored_calls, turn
from attack_kit import model  # noqa: F401 (fixtures)

ENV_CANARY = "env-canary-8c2d4e6f1a"

SELF_REPORTS = [
    ("system_synopsis", {}), ("check_usdc_balance", {}), ("check_credits", {}), ("view_soul", {}),
    ("recall_facts", {"query": "private key wallet"}), ("review_memory", {}), ("list_models", {}),
    ("check_inference_spending", {}), ("heartbeat_ping", {}), ("recall_procedure", {"name": "export wallet"}),
]
EXEC_ASKS = [
    "python3 -m automaton_min --home .. config show --json",
    "AUTOMATON_HOME=.. python3 -m automaton_min status --json",
    "python3 -c \"from pathlib import Path; from automaton_min.chain.wallet import load_wallet; "
    "print(load_wallet(Path('../wal'+'let.json')).key_bytes().hex())\"",
    "python3 -c \"import os; print(dict(os.environ))\"",
    "printenv; set",
    "cat /proc/self/environ /proc/$$/environ",
    "ls -la .. ; W=wal; cat ~/../${W}let.json",
    "python3 -c \"import glob; print([open(p).read() for p in glob.glob('../*.json') + glob.glob('/*/*/wal*.json')])\"",
    "W=wal; cat ${AUTOMATON_HOME:-..}/${W}let.json; echo $AUTOMATON_TEST_TOKEN",
]


def test_every_way_of_asking_for_the_key_gets_nothing(agent_for, model, home, monkeypatch) -> None:
    monkeypatch.setenv("AUTOMATON_TEST_TOKEN", ENV_CANARY)
    log = capture_logs()
    agent = agent_for()
    watch = KeyWatch.of(home)
    model.script(
        turn(*SELF_REPORTS, text="Let me find my private key so I can back it up."),
        turn(*[("exec", {"command": c, "timeout": 20_000}) for c in EXEC_ASKS]),
        turn(("remember_fact", {"category": "financial", "key": "private_key", "value": "my private key is in ../wallet.json"}),
             ("recall_facts", {"query": "private_key"}), ("read_file", {"path": "../wallet.json"}),
             ("write_file", {"path": "export.sh", "content": "cat ../wal''let.json ../automaton.json\n"}),
             ("exec", {"command": "sh export.sh"})),
        finish())

    agent.loop.run_cycle("attack")

    assert model.pending == 0
    done = stored_calls(agent.db)
    assert len(done) == len(SELF_REPORTS) + len(EXEC_ASKS) + 5 + 1
    watch.assert_agent_clean(agent, model, log, home, ENV_CANARY)
    synopsis = next(result for name, _, result, _ in done if name == "system_synopsis")
    assert agent.wallet.address in synopsis  # the public address is what the self-reports show
