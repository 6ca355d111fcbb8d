"""keccak-256 and EIP-55 addresses, checked against published vectors and against eth-utils (the oracle)."""

from __future__ import annotations

import hashlib
import re

import eth_utils
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automaton_min.chain.address import address_from_public_key, is_address, keccak256, to_checksum_address

_VALID = re.compile(r"0x[0-9a-fA-F]{40}")

# ---------------------------------------------------------------- keccak-256


@pytest.mark.parametrize(
    ("data", "digest"),
    [
        (b"", "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
        (b"abc", "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"),
        (
            b"The quick brown fox jumps over the lazy dog",
            "4d741b6f1eb29cb2a9b9911c82f56fa8d73b04959d3d9d222895df6c0b28aa15",
        ),
        (b"transfer(address,uint256)", "a9059cbb2ab09eb219583f4a59a5d0623ade346d962bcd4e46b11da047c9049b"),
    ],
)
def test_keccak256_known_vectors(data: bytes, digest: str) -> None:
    assert keccak256(data).hex() == digest


def test_keccak256_is_not_nist_sha3() -> None:
    """keccak-256 pads differently from the standardised SHA3-256; mixing them up breaks every address."""
    assert keccak256(b"") != hashlib.sha3_256(b"").digest()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))  # crosses the 136-byte rate boundary more than once
def test_keccak256_matches_eth_utils(data: bytes) -> None:
    assert keccak256(data) == eth_utils.keccak(data)


# ---------------------------------------------------------------- EIP-55

# https://eips.ethereum.org/EIPS/eip-55 -- "Test cases"
EIP55_NORMAL = [
    "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
    "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
    "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
    "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
]
EIP55_ALL_CAPS = ["0x52908400098527886E0F7030069857D2E4169EE7", "0x8617E340B3D01FA5F11F306F4090FD50E238070D"]
EIP55_ALL_LOWER = ["0xde709f2102306220921060314715629080e2fb77", "0x27b1fdb04752bbc536007a920d24acb045561c26"]


@pytest.mark.parametrize("expected", EIP55_NORMAL + EIP55_ALL_CAPS + EIP55_ALL_LOWER)
def test_eip55_spec_examples(expected: str) -> None:
    body = expected[2:]
    for given_form in ("0x" + body.lower(), "0x" + body.upper(), expected):
        assert to_checksum_address(given_form) == expected
    assert to_checksum_address(bytes.fromhex(body)) == expected


def test_eip55_output_differs_from_input_case() -> None:
    """A function that returned its input would pass the round-trip above only for checksummed input."""
    assert to_checksum_address("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed") != "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"


@settings(max_examples=250, deadline=None)
@given(st.binary(min_size=20, max_size=20), st.randoms(use_true_random=False))
def test_checksum_matches_eth_utils(raw: bytes, rnd) -> None:
    expected = eth_utils.to_checksum_address(raw)
    lower = raw.hex()
    mixed = "".join(c.upper() if rnd.random() < 0.5 else c for c in lower)
    assert to_checksum_address(raw) == expected
    assert to_checksum_address("0x" + lower) == expected
    assert to_checksum_address("0x" + lower.upper()) == expected
    assert to_checksum_address("0x" + mixed) == expected
    assert is_address("0x" + mixed)


BAD_TEXT = [
    "",
    "0x",
    "0x" + "a" * 39,
    "0x" + "a" * 41,
    "a" * 40,  # no 0x
    "0x" + "g" * 40,
    "0x" + "a" * 39 + "z",
    " 0x" + "a" * 40,
    "0x" + "a" * 40 + " ",
    "0x" + "a" * 40 + "\n",  # a trailing newline must not slip through a `$` anchor
    "0x" + "\uff10" * 40,  # full-width digits are not hex
    "0x" + "a" * 20 + "\n" + "a" * 20,
]


@pytest.mark.parametrize("text", BAD_TEXT)
def test_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError):
        to_checksum_address(text)
    assert not is_address(text)


@pytest.mark.parametrize("length", [0, 1, 19, 21, 32, 64])
def test_rejects_wrong_length_bytes(length: int) -> None:
    with pytest.raises(ValueError):
        to_checksum_address(b"\x01" * length)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60).filter(lambda t: not _VALID.fullmatch(t)))
def test_rejects_random_text(text: str) -> None:
    with pytest.raises(ValueError):
        to_checksum_address(text)
    assert not is_address(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64).filter(lambda b: len(b) != 20))
def test_rejects_random_bytes(raw: bytes) -> None:
    with pytest.raises(ValueError):
        to_checksum_address(raw)


# ---------------------------------------------------------------- public key -> address


def test_address_from_public_key_of_key_one() -> None:
    """Private key 1: its public key is the generator G; the address is well known."""
    gx = 0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798
    gy = 0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8
    public = gx.to_bytes(32, "big") + gy.to_bytes(32, "big")
    assert address_from_public_key(public) == "0x7E5F4552091A69125d5DfCb7b8C2659029395Bdf"


@pytest.mark.parametrize("length", [0, 33, 63, 65])
def test_address_from_public_key_rejects_wrong_length(length: int) -> None:
    with pytest.raises(ValueError):
        address_from_public_key(b"\x04" * length)
