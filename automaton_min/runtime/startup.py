"""Money at start, before the first cycle (README: Payments): open payment intents resolved from the chain, then the
bootstrap top-up, within one 60 s budget. A step that fails (node or API down, time up) is logged and start goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from automaton_min.chain.usdc import BASE, Network, rpc_url, usdc_balance
from automaton_min.clock import Clock
from automaton_min.config import local_only
from automaton_min.errors import AutomatonError
from automaton_min.log import get_logger
from automaton_min.treasury.payer import Payer, payer_options
from automaton_min.treasury.reconcile import READ_TIMEOUT_S, Budget, reconcile_at_start

if TYPE_CHECKING:
    from automaton_min.chain.wallet import Wallet
    from automaton_min.config import Config
    from automaton_min.treasury.topup import TopupResult
    from automaton_min.store.db import Database

STARTUP_BUDGET_S = 60.0

log = get_logger(__name__)


@dataclass
class StartupMoney:
    """What the start-up steps did."""

    reconciled: list[tuple[str, str]]
    topup: "TopupResult | None" = None


def bootstrap_at_start(db: "Database", wallet: "Wallet", config: "Config", budget: Budget, now: Clock,
                       network: Network = BASE) -> "TopupResult | None":
    """Credits under $5 and at least $5 of USDC: buy $5 of credits, once (see ``bootstrap_topup``)."""
    from automaton_min.conway.client import ConwayClient, conway_send
    from automaton_min.treasury.topup import bootstrap_topup

    api_url, api_key = config.get("conwayApiUrl"), config.get("conwayApiKey")
    if not api_key:
        return None
    node = rpc_url(config, network)
    timeout_s = budget.timeout(READ_TIMEOUT_S)
    conway = ConwayClient(api_url, api_key, db=db, now=now, timeout_s=timeout_s,  # retries end with the budget too
                          send=conway_send(timeout_s, deadline_s=budget.timeout(STARTUP_BUDGET_S)))
    credits = conway.credits_balance()  # a live reading only: a cached one could buy twice
    usdc = usdc_balance(node, wallet.address, network, timeout=budget.timeout(READ_TIMEOUT_S))
    payer = Payer(db, wallet, now=now, deadline=budget.deadline,
                  balance_of=lambda address: usdc_balance(node, address, network,
                                                          timeout=budget.timeout(READ_TIMEOUT_S)),
                  **payer_options(config.get("treasuryPolicy") or {}))
    return bootstrap_topup(payer, api_url, credits, usdc)


def money_at_start(db: "Database", wallet: "Wallet", config: "Config", *, now: Clock,
                   budget_s: float = STARTUP_BUDGET_S, network: Network = BASE) -> StartupMoney:
    """Reconcile, then bootstrap, within ``budget_s`` seconds overall; failures are logged, never raised. A local-only
    agent does neither: both read the chain."""
    budget = Budget(budget_s)
    result = StartupMoney([])
    if local_only(config):
        log.debug("money at start skipped: local only (no RPC node)")
        return result
    try:
        result.reconciled = reconcile_at_start(db, config, budget, now)
    except (AutomatonError, OSError) as exc:
        log.warning("open payments not reconciled at start", extra={"error": str(exc)})
    if result.reconciled:
        log.info("payments reconciled at start", extra={"changes": result.reconciled})
    try:
        result.topup = bootstrap_at_start(db, wallet, config, budget, now, network)
    except (AutomatonError, OSError) as exc:
        log.warning("bootstrap top-up not done at start", extra={"error": str(exc)})
    return result
