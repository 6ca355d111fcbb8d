"""A parent killed (SIGKILL) at each step of spawning and funding a child, then run again (README: Children): one
sandbox, one funding on the stand-in's ledger, a lifecycle that only ever took allowed steps. The parent is a real
process running the same functions the tools run, on a real state.db, against the Conway stand-in's directory
sandboxes and the release server; the child is the real program (the source tree, or ``AUTOMATON_BINARY``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from automaton_min.store.children import NEXT
from automaton_min.store.db import open_database
from standins.conway_api import ConwayApi
from standins.releases import TEST_PUBLIC_KEY, ReleaseServer, child_program, manifest

ARCH = f"linux-{os.uname().machine}"
PARENT = "0x" + "5a" * 20
FUNDING = 600

# One parent run: spawn the child (or resume it), finish a funding a crash interrupted, and fund it if it has had
# nothing yet (what an agent told the outcome would do). Arguments: home, Conway URL and key, manifest URL, key hex.
DRIVER = """
import sys
from pathlib import Path
from automaton_min.children.funding import finish_interrupted, fund_child
from automaton_min.children.genesis import check_genesis, constitution_hash
from automaton_min.children.pipeline import Parent, spawn
from automaton_min.clock import system_now
from automaton_min.config import DEFAULT_TREASURY_POLICY
from automaton_min.conway.client import ConwayClient
from automaton_min.store.children import get_child
from automaton_min.store.db import open_database
from automaton_min.update.baked import Build

home, url, key, manifest_url, public = sys.argv[1:6]
constitution = Path(home) / "constitution.md"
policy = {**DEFAULT_TREASURY_POLICY, "knownPayees": []}
with open_database(Path(home) / "state.db") as db:
    client = ConwayClient(url, key, db=db)
    parent = Parent(db, client, Build(None, bytes.fromhex(public), sys.argv[6], "", sys.argv[7]), manifest_url,
                    "%s", constitution_hash(constitution), url, 512, system_now)
    child = spawn(parent, "kid1", check_genesis("kid", "Count the stars.", None))
    finish_interrupted(db, client, policy, None, child)
    if get_child(db, "kid1").funded_amount_cents == 0:
        fund_child(db, client, policy, None, child_id="kid1", amount_cents=%d, note=None, transfers_this_turn=0,
                   now_ms=system_now())
    print(get_child(db, "kid1").status)
""" % (PARENT, FUNDING)

POINTS = ["child.requested", "child.sandbox_created", "child.runtime_installed", "child.wallet_made",
          "child.funding_named", "transfer.answered",
          "child.funding_recorded"]


def run_parent(home, api, releases, version, crash_at: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AUTOMATON_CRASH_AT"}
    if crash_at:
        env["AUTOMATON_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-c", DRIVER, str(home), api.url, api.api_key, releases.manifest_url,
                           TEST_PUBLIC_KEY.hex(), version, ARCH], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("point", POINTS)
def test_a_parent_killed_at_a_step_resumes_with_one_sandbox_and_one_funding(point, tmp_path):
    home = tmp_path / "parent"
    home.mkdir()
    (home / "constitution.md").write_text("# Constitution\n")
    program, version = child_program()
    with ConwayApi(root=tmp_path / "cloud", balance_cents=10_000) as api, ReleaseServer() as releases:
        releases.publish(manifest(version, {ARCH: program}, _now()), {ARCH: program})
        killed = run_parent(home, api, releases, version, point)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        again = run_parent(home, api, releases, version, None)
        assert again.returncode == 0, again.stderr[-2000:]
        assert again.stdout.split() == ["funded"]

        creates = [r for r in api.requests if r.method == "POST" and r.path == "/v1/sandboxes"]
        named = [s for s in api.sandboxes.values() if s.get("name") == "automaton-child-kid1"]
        assert len(creates) == 1 and len(named) == 1
        with open_database(home / "state.db") as db:
            address, funded = db.query_one("SELECT address, funded_amount_cents FROM children WHERE id = 'kid1'")
            steps = db.query("SELECT from_state, to_state FROM child_lifecycle_events WHERE child_id = 'kid1' "
                             "ORDER BY created_at, id")
            spent = db.scalar("SELECT COALESCE(SUM(amount_cents), 0) FROM spend_tracking WHERE category = 'transfer'")
            ledger = db.query("SELECT amount_cents FROM transactions WHERE type = 'transfer_out'")
            waiting = db.query("SELECT key FROM kv WHERE key GLOB 'child_funding.*'")
        assert api.credited == {address.lower(): FUNDING} and api.balance_cents == 10_000 - FUNDING
        assert funded == FUNDING and spent == FUNDING
        assert ledger == [(FUNDING,)] and waiting == []  # recorded once, and nothing left on its way
        assert [to for _, to in steps] == ["requested", "sandbox_created", "runtime_ready", "wallet_verified", "funded"]
        assert all(to in NEXT[frm] for frm, to in steps[1:])


def _now() -> int:
    from automaton_min.clock import system_now

    return system_now()
