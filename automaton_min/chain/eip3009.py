"""EIP-3009 ``TransferWithAuthorization``: the signed USDC transfer that x402 "exact" payments carry."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from automaton_min.chain.eip712 import sign_typed_data, typed_data_digest
from automaton_min.chain.wallet import Wallet

TRANSFER_WITH_AUTHORIZATION_TYPES = {
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ]
}


@dataclass(frozen=True)
class TokenDomain:
    """The EIP-712 domain of an EIP-3009 token contract (USDC: name "USD Coin", version "2")."""

    name: str
    version: str
    chain_id: int
    verifying_contract: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "chainId": self.chain_id,
                "verifyingContract": self.verifying_contract}


@dataclass(frozen=True)
class TransferAuthorization:
    """Permission for anyone to move ``value`` atomic units from ``sender`` to ``recipient`` once, within a time
    window."""

    sender: str
    recipient: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes

    def __post_init__(self) -> None:
        if len(self.nonce) != 32:
            raise ValueError("an EIP-3009 nonce is 32 bytes")
        if self.value < 0 or self.valid_after < 0 or self.valid_before <= self.valid_after:
            raise ValueError("value must be non-negative and validBefore later than validAfter")

    def message(self) -> dict[str, Any]:
        return {
            "from": self.sender,
            "to": self.recipient,
            "value": self.value,
            "validAfter": self.valid_after,
            "validBefore": self.valid_before,
            "nonce": "0x" + self.nonce.hex(),
        }

    def wire(self) -> dict[str, str]:
        """The ``authorization`` object of an x402 payload: every value a string."""
        return {k: str(v) if isinstance(v, int) else v for k, v in self.message().items()}


def new_nonce() -> bytes:
    """32 random bytes from the OS CSPRNG."""
    return secrets.token_bytes(32)


def authorization_typed_data(authorization: TransferAuthorization, domain: TokenDomain) -> dict[str, Any]:
    return {
        "types": TRANSFER_WITH_AUTHORIZATION_TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": domain.as_dict(),
        "message": authorization.message(),
    }


def authorization_digest(authorization: TransferAuthorization, domain: TokenDomain) -> bytes:
    return typed_data_digest(authorization_typed_data(authorization, domain))


def sign_authorization(wallet: Wallet, authorization: TransferAuthorization, domain: TokenDomain) -> str:
    """Sign ``authorization`` with ``wallet``; the sender must be the wallet's own address."""
    if authorization.sender.lower() != wallet.address.lower():
        raise ValueError("the authorization's sender is not this wallet")
    return sign_typed_data(wallet, authorization_typed_data(authorization, domain))
