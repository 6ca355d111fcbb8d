"""Assembling a running agent: config, wallet, database, clients, router, tools, policy, hooks, loop."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from automaton_min.agent.hooks import AgentHooks
from automaton_min.agent.key_guard import KeyGuard
from automaton_min.agent.loop import AgentLoop
from automaton_min.agent.prompts import Identity
from automaton_min.agent.states import read_agent_state, set_agent_state
from automaton_min.agent.survival import FinancialCache, FinancialReading
from automaton_min.agent.tools.registry import ToolRegistry
from automaton_min.agent.tools.services import ToolServices
from automaton_min.agent.turn_context import TurnContextBuilder
from automaton_min.chain.usdc import BASE, usdc_balance
from automaton_min.chain.wallet import Wallet, load_wallet
from automaton_min.clock import Clock, from_iso, system_now, to_iso
from automaton_min.config import LOCAL_ONLY_NO_PAYMENTS, LOCAL_ONLY_NO_RELAY, SECRET_KEYS, Config, db_path, local_only
from automaton_min.conway.sandbox import Sandbox
from automaton_min.runtime.sandboxes import sandbox_for
from automaton_min.home import Home
from automaton_min.ids import new_ulid
from automaton_min.inference.providers import Providers
from automaton_min.inference.registry import ModelRegistry
from automaton_min.inference.router import Router
from automaton_min.memory.compression import HistoryFolder
from automaton_min.memory.retrieval import MemoryBudget, MemoryRetriever
from automaton_min.social.injection import one_line
from automaton_min.log import get_logger
from automaton_min.observe.metrics import NO_METRICS, Metrics
from automaton_min.store import inbox
from automaton_min.store.db import STORAGE_ERRORS, Database, open_database
from automaton_min.store.disk_reserve import DiskReserve
from automaton_min.store.identity import read_identity
from automaton_min.store.kv import get_value, set_json, set_value
from automaton_min.chain.usdc import rpc_url
from automaton_min.runtime.startup import money_at_start
from automaton_min.runtime.status import CONFINEMENT_KEY, LAST_RUN_KEY
from automaton_min.store.wake import OWNER_WAKE_SOURCE, WakeEventLog, take_pending
from automaton_min.treasury.payer import Payer, payer_options
from automaton_min.update.baked import Build, this_build

log = get_logger(__name__)


@dataclass(frozen=True)
class LiveBalances:
    """The balances the tools report: credits as the loop's cache knows them, USDC read from the node."""

    hooks: AgentHooks
    read_usdc: Callable[[], int]
    now: Clock

    def credits_cents(self) -> int | None:
        return self.hooks.finances(self.now()).credits_cents

    def usdc_atomic(self) -> int:
        return self.read_usdc()


@dataclass
class Agent:
    """The assembled agent: its loop and the parts the runtime around it drives."""

    loop: AgentLoop
    hooks: AgentHooks
    db: Database
    sandbox: Sandbox
    wallet: Wallet | None = None
    relay: Any = None  # social.relay.RelayClient, or None without a relay
    now: Clock = system_now
    metrics: Metrics = NO_METRICS

    @property
    def confinement(self) -> str:
        """Which confinement holds the agent's commands, in a few words."""
        return self.sandbox.describe()

    def sleep_until(self) -> str | None:
        return get_value(self.db, "sleep_until")

    def take_wakes(self) -> list[str]:
        """Consume the pending wake events; the reasons of those whose work no cycle has picked up yet."""
        now_ms = self.now()
        events = take_pending(self.db, now_ms=now_ms, picked_up_before_ms=self.loop.last_inbox_check_ms)
        for event in events:
            self.metrics.wake_latency(event.source, max(now_ms - from_iso(event.created_at), 0))
        self.loop.owner_words = [event.reason for event in events if event.source == OWNER_WAKE_SOURCE]
        return [f"{event.source}: {event.reason}" for event in events]

    def close(self) -> None:
        """Leave the agent sleeping, stop the spawner, record the run, fold the WAL back in, close the database.

        On a disk that refuses writes the records are skipped (logged): the spawner still stops and the database
        still closes, intact, and the process still exits 0."""
        now_ms = system_now()
        try:
            if read_agent_state(self.db) in ("running", "waking", "low_compute", "critical"):
                set_agent_state(self.db, "sleeping", now_ms, reason="the runtime stopped")
        except STORAGE_ERRORS as exc:
            log.error("could not record the stop: the database cannot be written", extra={"error": str(exc)})
        self.sandbox.close()
        try:
            set_json(self.db, LAST_RUN_KEY, {"startedAt": get_value(self.db, "start_time"), "stoppedAt": to_iso(now_ms),
                                             "pid": os.getpid()}, now_ms)
            self.db.checkpoint()
        except STORAGE_ERRORS as exc:
            log.error("could not record the run or fold the WAL back in: the database cannot be written",
                      extra={"error": str(exc)})
        self.db.close()


def unread_usdc() -> int:
    """A local-only agent's USDC reader: it reads nothing and says why."""
    from automaton_min.errors import UserError

    raise UserError("not read: the agent is local only (localOnly is true), so no RPC node is asked")


@contextmanager
def start_step(name: str) -> Iterator[None]:
    """One start-up step: a debug line when it is done (the banner says the start); a failure names the step, then
    propagates."""
    try:
        yield
    except BaseException:
        log.error("start-up step failed", extra={"step": name})
        raise
    log.debug("start-up step done", extra={"step": name})


def build_agent(home: Home, config: Config, *, now: Clock = system_now, metrics: Metrics = NO_METRICS,
                service: bool = False, schedule_changed: threading.Event | None = None,
                progress: Callable[[], None] | None = None, launched: Any = None,
                release: Build | None = None) -> Agent:
    """Everything the loop needs, from the home and its config, in the seed's order, one logged step at a time.
    ``service``: built for ``automaton-min run`` (local commands then get a cgroup of their own where possible);
    ``schedule_changed`` is set when a tool changes the heartbeat's schedule; ``progress`` ticks for the watchdog;
    ``launched``: the confined spawner, already started (``sandbox_for``); ``release``: the build children get their
    binary by (default: this one's, ``update.baked.this_build``)."""
    from automaton_min.heartbeat.control import HeartbeatControl
    from automaton_min.agent.policy import PolicyEngine, default_rules
    from automaton_min.agent.policy.rules_command import kernel_confines
    from automaton_min.agent.tools.builtin import STATUS_CHECK_TOOLS, builtin_tools
    from automaton_min.conway.client import ConwayClient
    from automaton_min.social.relay import RelayClient

    with start_step("wallet"):
        wallet: Wallet = load_wallet(home.wallet_path, config.get("walletAddress"))
        key_guard = KeyGuard(wallet.key_bytes(), home.wallet_path.read_bytes(),
                             [config.get(name) for name in sorted(SECRET_KEYS) if config.get(name)])
    with start_step("database"):
        db = open_database(db_path(home, config), now=now)
        inbox.reclaim_stale(db)
        identity_row = read_identity(db)
    identity = Identity(config.get("name", identity_row.get("name", "automaton")), wallet.address,
                        config.get("creatorAddress", identity_row.get("creator", "")), config.get("sandboxId") or None)
    with start_step("conway client"):
        api_key = config.get("conwayApiKey")
        conway = ConwayClient(config.get("conwayApiUrl"), api_key, db=db, now=now) if api_key else None
    with start_step("inference"):
        registry = ModelRegistry(db, now)
        registry.seed_baseline()
        if config.get("ollamaBaseUrl"):
            registry.discover_ollama(config.get("ollamaBaseUrl"))
        providers = Providers(config.values)
        router = Router(db, registry, config.values, providers, session_id=new_ulid(now()), now=now,
                        describe=providers.context_window, metrics=metrics)
    with start_step("social relay"):
        relay = RelayClient.from_config(config, wallet, now=now)
    with start_step("sandbox"):
        workspace = home.root / "workspace"
        sandbox = sandbox_for(config, workspace=workspace, client=conway, home=home.root, own_cgroup=service,
                              launched=launched)
    with start_step("policy and spend limits"):
        alone = local_only(config)  # no RPC node: no balance is read, and the payer refuses every payment
        node = rpc_url(config, BASE)
        read_usdc = unread_usdc if alone else lambda: usdc_balance(node, wallet.address, BASE)  # rpcUrl, else Base's
        finances = FinancialCache(conway.credits, None if alone else read_usdc, now=now) if conway else None
        payer = Payer(db, wallet, balance_of=None if alone else lambda address: usdc_balance(node, address, BASE),
                      now=now, refuse=LOCAL_ONLY_NO_PAYMENTS if alone else None,
                      **payer_options(config.get("treasuryPolicy") or {}))
        from automaton_min.runtime.genesis import detect_sandbox_id

        policy = PolicyEngine(default_rules(), db=db, config=config.values, home=home, workspace=workspace, now=now,
                              balance_cents=(lambda: finances.reading().credits_cents) if finances else None,
                              commands_confined=kernel_confines(sandbox, detect_sandbox_id()), metrics=metrics)

    def inline_topup(reading: FinancialReading) -> None:
        from automaton_min.treasury.topup import bootstrap_topup

        if reading.credits_cents is not None and reading.usdc_atomic is not None:
            bootstrap_topup(payer, config.get("conwayApiUrl"), reading.credits_cents, reading.usdc_atomic)

    hooks = AgentHooks(db, config, home, now=now, finances=finances, policy=policy,
                         topup=inline_topup if conway else None, key_guard=key_guard, metrics=metrics)
    disk = DiskReserve(home.root, workspace) if sandbox.is_local else None
    services = ToolServices(sandbox=sandbox, conway=conway, home=home, wallet_address=wallet.address,
                            balances=LiveBalances(hooks, read_usdc, now), payer=payer, registry=registry, relay=relay,
                            disk=disk, heartbeat=HeartbeatControl(db, now=now, poke=schedule_changed.set)
                            if schedule_changed is not None else None, release=release or this_build(),
                            router=router, off={"relay": LOCAL_ONLY_NO_RELAY} if local_only(config) else None)
    retriever = MemoryRetriever(db, now, MemoryBudget.from_config(config.values), line=one_line)
    context = TurnContextBuilder(db, now, router, retriever, HistoryFolder(db, now), events=WakeEventLog(db),
                                 idle_tools=STATUS_CHECK_TOOLS)
    loop = AgentLoop(db, config.values, identity, router, ToolRegistry(builtin_tools()), hooks, now=now,
                     services=services, metrics=metrics, context=context, progress=progress)
    set_value(db, "start_time", to_iso(now()), now())
    set_value(db, CONFINEMENT_KEY, sandbox.describe(), now())  # for status
    with start_step("bootstrap top-up"):
        money_at_start(db, wallet, config, now=now, network=BASE)  # reconcile open payments, bootstrap top-up (60 s)
    return Agent(loop, hooks, db, sandbox, wallet, relay, now, metrics)
