"""USDC on Base: contract addresses, networks, and the on-chain balance (in atomic units, 6 decimals)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from automaton_min.chain.address import to_checksum_address
from automaton_min.chain.rpc import RpcError, eth_call, rpc_call

USDC_DECIMALS = 6
ATOMIC_PER_USDC = 10**USDC_DECIMALS
ATOMIC_PER_CENT = ATOMIC_PER_USDC // 100
BALANCE_OF_SELECTOR = bytes.fromhex("70a08231")


@dataclass(frozen=True)
class Network:
    """A chain USDC lives on, by its CAIP-2 id and the x402 v1 name."""

    caip2: str
    v1_name: str
    chain_id: int
    usdc: str
    default_rpc_url: str


BASE = Network("eip155:8453", "base", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "https://mainnet.base.org")
BASE_SEPOLIA = Network("eip155:84532", "base-sepolia", 84532, "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                       "https://sepolia.base.org")
NETWORKS = (BASE, BASE_SEPOLIA)


def network_named(name: str) -> Network | None:
    """The network for a CAIP-2 id (``eip155:8453``) or an x402 v1 name (``base``)."""
    for network in NETWORKS:
        if name in (network.caip2, network.v1_name):
            return network
    return None


def require_chain(rpc_url: str, network: Network, timeout: float = 10.0) -> None:
    """Check that the node serves ``network``: a read from another chain would be a misleading number."""
    answer = rpc_call(rpc_url, "eth_chainId", [], timeout)
    try:
        chain_id = int(answer, 16)
    except (TypeError, ValueError):
        raise RpcError(f"RPC eth_chainId: {rpc_url} answered {answer!r}, not a chain id") from None
    if chain_id != network.chain_id:
        raise RpcError(f"{rpc_url} serves chain {chain_id}, not {network.caip2}; set rpcUrl for that network")


def usdc_balance(rpc_url: str, address: str, network: Network = BASE, timeout: float = 10.0) -> int:
    """``balanceOf(address)`` of the network's USDC contract, in atomic units; any failure (a node unreachable or on
    another chain) raises ``RpcError``, never reads as zero."""
    require_chain(rpc_url, network, timeout)
    owner = bytes.fromhex(to_checksum_address(address)[2:]).rjust(32, b"\0")
    raw = eth_call(rpc_url, network.usdc, BALANCE_OF_SELECTOR + owner, timeout)
    if len(raw) != 32:
        raise RpcError(f"balanceOf on {network.caip2}: expected 32 bytes, got {len(raw)}")
    return int.from_bytes(raw, "big")


def format_usdc(atomic: int) -> str:
    """``12.345678`` style text for an amount in atomic units."""
    sign = "-" if atomic < 0 else ""
    whole, fraction = divmod(abs(atomic), ATOMIC_PER_USDC)
    return f"{sign}{whole}.{fraction:06d}"


AUTHORIZATION_STATE_SELECTOR = bytes.fromhex("e94a0102")  # authorizationState(address,bytes32)


def authorization_used(rpc_url: str, network: Network, authorizer: str, nonce: bytes, timeout: float = 10.0) -> bool:
    """Whether the token contract has consumed (or cancelled) ``authorizer``'s EIP-3009 ``nonce``."""
    require_chain(rpc_url, network, timeout)
    owner = bytes.fromhex(to_checksum_address(authorizer)[2:]).rjust(32, b"\0")
    raw = eth_call(rpc_url, network.usdc, AUTHORIZATION_STATE_SELECTOR + owner + nonce, timeout)
    if len(raw) != 32:
        raise RpcError(f"authorizationState on {network.caip2}: expected 32 bytes, got {len(raw)}")
    return int.from_bytes(raw, "big") != 0


def rpc_url(config: Any, network: Network = BASE) -> str:
    """``rpcUrl`` from the config (``AUTOMATON_RPC_URL`` overrides it), else the network's public endpoint."""
    configured = config.get("rpcUrl") if config else os.environ.get("AUTOMATON_RPC_URL")
    return configured or network.default_rpc_url
