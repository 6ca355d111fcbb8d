"""Wiring for the money commands: wallet balance, provisioning, top-ups."""

from __future__ import annotations

import os
from typing import Any

from automaton_min.chain.usdc import BASE, Network, format_usdc, usdc_balance
from automaton_min.chain.wallet import load_wallet
from automaton_min.config import DEFAULTS, Config, db_path
from automaton_min.conway.provision import ProvisionResult, provision
from automaton_min.conway.topup import TopupResult, topup
from automaton_min.home import Home
from automaton_min.runtime.genesis import init_home
from automaton_min.store.db import open_database
from automaton_min.treasury.payer import Payer, payer_options


def rpc_url(config: Config | None, network: Network = BASE) -> str:
    """``rpcUrl`` from the config (``AUTOMATON_RPC_URL`` overrides it), else the network's public endpoint."""
    configured = config.get("rpcUrl") if config else os.environ.get("AUTOMATON_RPC_URL")
    return configured or network.default_rpc_url


def wallet_report(home: Home, config: Config | None, network: Network = BASE) -> dict[str, Any]:
    """The wallet's address and its USDC balance (an RPC failure raises; it never reads as zero)."""
    wallet = load_wallet(home.wallet_path)
    url = rpc_url(config, network)
    balance = usdc_balance(url, wallet.address, network)
    return {"address": wallet.address, "network": network.caip2, "usdc": format_usdc(balance), "usdcAtomic": balance, "rpcUrl": url}


def provision_key(home: Home, config: Config | None, api_url: str | None) -> ProvisionResult:
    """Sign in to Conway and save an API key; the wallet is created first if there is none."""
    wallet, _ = init_home(home)
    url = api_url or os.environ.get("CONWAY_API_URL") or (config.get("conwayApiUrl") if config else None) or DEFAULTS["conwayApiUrl"]
    return provision(home, wallet, url)


def buy_credits(home: Home, config: Config, usd: int) -> TopupResult:
    """Top up ``usd`` dollars of Conway credits with the wallet's USDC."""
    wallet = load_wallet(home.wallet_path)
    url = rpc_url(config)
    with open_database(db_path(home, config)) as db:
        payer = Payer(db, wallet, balance_of=lambda address: usdc_balance(url, address, BASE),
                      **payer_options(config["treasuryPolicy"]))
        return topup(payer, config["conwayApiUrl"], usd)
