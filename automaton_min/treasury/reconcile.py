"""Open payment intents against the chain, within a time budget (at start and from the heartbeat)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from automaton_min.chain.usdc import authorization_used, network_named, rpc_url
from automaton_min.clock import Clock
from automaton_min.config import local_only
from automaton_min.net.http import NetworkError
from automaton_min.treasury.ledger import Intent
from automaton_min.treasury.payer import reconcile_open_intents

if TYPE_CHECKING:
    from automaton_min.config import Config
    from automaton_min.store.db import Database

READ_TIMEOUT_S = 10.0


class Budget:
    """A deadline on the monotonic clock; ``timeout(cap)`` is ``cap`` cut to the time left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def timeout(self, cap: float) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise NetworkError("the start-up time budget ran out")
        return min(cap, left)


def reconcile_at_start(db: "Database", config: "Config", budget: Budget, now: Clock) -> list[tuple[str, str]]:
    """Ask the chain about every open intent (``authorizationState``); each read within the budget. A local-only agent
    asks nothing (its open intents stay open until it may read the chain again)."""
    if local_only(config):
        return []

    def used(intent: Intent) -> bool:
        network = network_named(intent.network)
        assert network is not None  # reconcile_open_intents skips other networks
        return authorization_used(rpc_url(config, network), network, intent.payer, bytes.fromhex(intent.nonce[2:]),
                                  timeout=budget.timeout(READ_TIMEOUT_S))

    return reconcile_open_intents(db, used, now=now)
