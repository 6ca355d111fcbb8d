"""Wiring for the money commands: wallet balance, provisioning, top-ups."""

from __future__ import annotations

import os
from typing import Any, Callable

from automaton_min.chain.rpc import RpcError
from automaton_min.chain.usdc import BASE, Network, format_usdc, rpc_url, usdc_balance
from automaton_min.chain.wallet import load_wallet
from automaton_min.config import DEFAULTS, LOCAL_ONLY_NO_PAYMENTS, Config, db_path, local_only
from automaton_min.conway.provision import ProvisionError, ProvisionResult, provision
from automaton_min.treasury.topup import TopupResult, topup
from automaton_min.errors import RuntimeFailure, UserError
from automaton_min.home import Home
from automaton_min.net.http import HttpError, NetworkError
from automaton_min.runtime.genesis import init_home
from automaton_min.store.db import open_database
from automaton_min.treasury.payer import Payer, payer_options


class ServiceError(RuntimeFailure):
    """A node or API did not answer usefully: ``problem`` names the URL, ``fix`` the setting to change."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


def _rpc_fix(url: str) -> str:
    return f"the node is {url}: set rpcUrl in automaton.json (or AUTOMATON_RPC_URL) to a Base RPC that answers"


def _conway_fix(url: str, *, flag: bool = False) -> str:
    where = "--api-url, CONWAY_API_URL or conwayApiUrl in automaton.json" if flag else "conwayApiUrl in automaton.json"
    return f"the Conway API is {url}: check it is reachable, or set {where}"


def wallet_report(home: Home, config: Config | None, network: Network = BASE) -> dict[str, Any]:
    """The wallet's address and its USDC balance (an RPC failure raises; it never reads as zero). A local-only agent's
    balance is not read (``usdc`` None, and ``localOnly`` says why)."""
    wallet = load_wallet(home.wallet_path, config.get("walletAddress") if config else None)
    if local_only(config):
        return {"address": wallet.address, "network": network.caip2, "usdc": None, "usdcAtomic": None,
                "rpcUrl": None, "localOnly": True}
    url = rpc_url(config, network)
    try:
        balance = usdc_balance(url, wallet.address, network)
    except RpcError as exc:
        raise ServiceError(str(exc), _rpc_fix(url)) from None
    return {"address": wallet.address, "network": network.caip2, "usdc": format_usdc(balance), "usdcAtomic": balance,
            "rpcUrl": url}


def provision_key(home: Home, config: Config | None, api_url: str | None, *,
                  progress: Callable[[str], None] | None = None) -> ProvisionResult:
    """Sign in to Conway and save an API key; the wallet is created first if there is none."""
    wallet, _ = init_home(home)
    url = (api_url or os.environ.get("CONWAY_API_URL") or (config.get("conwayApiUrl") if config else None)
           or DEFAULTS["conwayApiUrl"])
    try:
        return provision(home, wallet, url, progress=progress)
    except ProvisionError as exc:
        raise ServiceError(str(exc), _conway_fix(url, flag=True)) from None


def buy_credits(home: Home, config: Config, usd: int, *, progress: Callable[[str], None] | None = None) -> TopupResult:
    """Top up ``usd`` dollars of Conway credits with the wallet's USDC (refused at once for a local-only agent)."""
    if local_only(config):
        raise UserError(f"top-up refused: {LOCAL_ONLY_NO_PAYMENTS}")
    wallet = load_wallet(home.wallet_path, config.get("walletAddress"))
    url = rpc_url(config)
    with open_database(db_path(home, config)) as db:
        payer = Payer(db, wallet, balance_of=lambda address: usdc_balance(url, address, BASE),
                      **payer_options(config["treasuryPolicy"]))
        try:
            return topup(payer, config["conwayApiUrl"], usd, progress=progress)
        except RpcError as exc:
            raise ServiceError(str(exc), _rpc_fix(url)) from None
        except (NetworkError, HttpError) as exc:
            raise ServiceError(str(exc), _conway_fix(config["conwayApiUrl"])) from None
