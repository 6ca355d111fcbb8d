"""The hand-rolled secp256k1 (chain/secp256k1.py) against eth_keys and eth-account: the same public keys, the same
deterministic signatures byte for byte, the same recovered keys, the same refusals."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_keys import keys
from eth_keys.exceptions import BadSignature, ValidationError
from hypothesis import given, settings
from hypothesis import strategies as st

from automaton_min.chain import secp256k1
from automaton_min.chain.eip191 import personal_message_digest

ORACLE = settings(max_examples=300, deadline=None)
KEYS = st.integers(min_value=1, max_value=secp256k1.N - 1).map(lambda n: n.to_bytes(32, "big"))
DIGESTS = st.binary(min_size=32, max_size=32)
EDGE_KEYS = [1, 2, 3, secp256k1.N - 1, secp256k1.N // 2, secp256k1.N // 2 + 1, 2**255]


@ORACLE
@given(KEYS)
def test_public_keys_match_eth_keys(key: bytes) -> None:
    assert secp256k1.public_key(key) == keys.PrivateKey(key).public_key.to_bytes()


@pytest.mark.parametrize("scalar", EDGE_KEYS)
def test_public_keys_of_edge_scalars(scalar: int) -> None:
    key = scalar.to_bytes(32, "big")
    assert secp256k1.public_key(key) == keys.PrivateKey(key).public_key.to_bytes()


@ORACLE
@given(KEYS, DIGESTS)
def test_signatures_match_eth_keys_and_recover(key: bytes, digest: bytes) -> None:
    r, s, parity = secp256k1.sign(key, digest)
    expected = keys.PrivateKey(key).sign_msg_hash(digest)
    assert (r, s, parity) == (expected.r, expected.s, expected.v)
    assert s <= secp256k1.N // 2
    assert secp256k1.recover(digest, r, s, parity) == keys.PrivateKey(key).public_key.to_bytes()


@pytest.mark.parametrize("scalar", EDGE_KEYS)
@pytest.mark.parametrize("digest", [b"\x00" * 32, b"\xff" * 32, secp256k1.N.to_bytes(32, "big"),
                                    (secp256k1.N + 1).to_bytes(32, "big")])
def test_edge_digests_match_eth_account(scalar: int, digest: bytes) -> None:
    """Digests of zero and at or above the order (RFC 6979 reduces them mod n) sign as eth-account signs them."""
    key = scalar.to_bytes(32, "big")
    r, s, parity = secp256k1.sign(key, digest)
    signed = Account.unsafe_sign_hash(digest, key)
    assert (r, s, parity + 27) == (signed.r, signed.s, signed.v)


@ORACLE
@given(KEYS, st.text(max_size=80))
def test_personal_messages_sign_as_eth_account_does(key: bytes, text: str) -> None:
    r, s, parity = secp256k1.sign(key, personal_message_digest(text.encode()))
    signed = Account.sign_message(encode_defunct(text=text), key)
    assert r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([parity + 27]) == bytes(signed.signature)


@ORACLE
@given(DIGESTS, st.integers(min_value=0, max_value=2**256 - 1), st.integers(min_value=0, max_value=2**256 - 1),
       st.integers(min_value=0, max_value=1))
def test_recovery_agrees_with_eth_keys_on_any_numbers(digest: bytes, r: int, s: int, parity: int) -> None:
    """Random (r, s): recovered to the same key where eth_keys recovers one, refused where it refuses."""
    try:
        expected = keys.Signature(vrs=(parity, r, s)).recover_public_key_from_msg_hash(digest).to_bytes()
    except (BadSignature, ValidationError):
        expected = None
    try:
        got = secp256k1.recover(digest, r, s, parity)
    except secp256k1.SignatureError:
        got = None
    assert got == expected


@pytest.mark.parametrize("r, s, recovery_id", [(0, 1, 0), (1, 0, 0), (secp256k1.N, 1, 0), (1, secp256k1.N, 1),
                                               (1, 1, 2), (5, 1, 0)])
def test_malformed_signatures_are_refused(r: int, s: int, recovery_id: int) -> None:
    """Out of range numbers, a recovery id past 1, and an r that is no point's x (5 is none on secp256k1)."""
    with pytest.raises(secp256k1.SignatureError):
        secp256k1.recover(hashlib.sha256(b"x").digest(), r, s, recovery_id)


@pytest.mark.parametrize("bad", [b"", b"\x01" * 31, b"\x00" * 32, secp256k1.N.to_bytes(32, "big"), b"\xff" * 32])
def test_invalid_private_keys_are_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        secp256k1.public_key(bad)
    with pytest.raises(ValueError):
        secp256k1.sign(bad, b"\x00" * 32)


def test_signing_imports_nothing_of_eth_keys_or_pydantic() -> None:
    """A signature in a fresh interpreter leaves eth_keys, eth_utils and pydantic unimported (13 MB held for the
    daemon's life when they came with the first relay poll)."""
    code = ("import sys\n"
            "from automaton_min.chain.signing import recover_signer, sign_digest\n"
            "from automaton_min.chain.wallet import Wallet, derive_address\n"
            "key = bytes(range(1, 33))\n"
            "wallet = Wallet(key, address=derive_address(key))\n"
            "signature = sign_digest(wallet, bytes(32))\n"
            "assert recover_signer(bytes(32), signature) == wallet.address\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('eth_keys', 'eth_utils', 'eth_typing', 'pydantic', 'pydantic_core', 'cytoolz', 'toolz')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
