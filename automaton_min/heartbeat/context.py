"""Building a task's ``TaskContext`` from the worker thread's own database connection. Clients that remember things in
the database (the Conway client's last balance, the payer's intents) are made per run on that connection, because a
``Database`` belongs to the thread that opened it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.clock import Clock, system_now
from automaton_min.config import local_only
from automaton_min.heartbeat.task_api import TaskContext
from automaton_min.observe.clock_trust import ClockTrust

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.home import Home
    from automaton_min.store.db import Database


class ContextFactory:
    """``factory(db, stop) -> TaskContext`` for the scheduler. ``wallet`` (a chain.wallet.Wallet) enables the USDC
    reader and the automatic top-up; ``relay`` and ``metrics`` are handed through to the tasks that use them."""

    def __init__(self, home: "Home", config: "Config", *, wallet: Any = None, wallet_address: str | None = None,
                 now: Clock = system_now, relay: Any = None, metrics: Any = None,
                 tier_of: Callable[["Database"], str] | None = None) -> None:
        self.home, self.config, self.wallet, self.now = home, config, wallet, now
        self.wallet_address = wallet_address or (wallet.address if wallet is not None
                                                 else config.get("walletAddress", ""))
        self.relay, self.metrics = relay, metrics
        self.tier_of = tier_of

    def __call__(self, db: "Database", stop: threading.Event) -> TaskContext:
        from automaton_min.heartbeat.tasks import known_tier

        conway = None
        if self.config.get("conwayApiKey"):
            from automaton_min.conway.client import ConwayClient

            conway = ConwayClient(self.config.get("conwayApiUrl"), self.config.get("conwayApiKey"), db=db, now=self.now)
        usdc = topup = None
        if self.wallet is not None and not local_only(self.config):  # local only: no RPC node, nothing paid
            usdc, topup = self._money(db)
        tier = self.tier_of(db) if self.tier_of else known_tier(db, self.config)
        return TaskContext(db=db, config=self.config, home=self.home, now=self.now, tier=tier,
                           wallet_address=self.wallet_address, conway=conway, relay=self.relay, metrics=self.metrics,
                           stop=stop, usdc_balance=usdc, topup=topup if conway is not None else None,
                           clock_trust=ClockTrust.of(self.config))

    def _money(self, db: "Database") -> tuple[Callable[[], int], Callable[[int, int], Any]]:
        from automaton_min.chain.usdc import BASE, usdc_balance
        from automaton_min.chain.usdc import rpc_url
        from automaton_min.treasury.payer import Payer, payer_options

        node = rpc_url(self.config, BASE)
        wallet, config = self.wallet, self.config

        def read_usdc() -> int:
            return usdc_balance(node, wallet.address, BASE)

        def topup(credits_cents: int, usdc_atomic: int) -> Any:
            from automaton_min.treasury.topup import bootstrap_topup

            payer = Payer(db, wallet, balance_of=lambda address: usdc_balance(node, address, BASE), now=self.now,
                          **payer_options(config.get("treasuryPolicy") or {}))
            return bootstrap_topup(payer, config.get("conwayApiUrl"), credits_cents, usdc_atomic)

        return read_usdc, topup
