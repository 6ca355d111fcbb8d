"""EIP-712 typed structured data: type encoding, struct hashing, the domain separator, signing.

Any struct: nested structs and arrays (fixed, dynamic, nested), ``string``, ``bytes``, ``bytes1``..``bytes32``,
``(u)int8``..``(u)int256``, ``address``, ``bool``. Typed data is the wallets' JSON shape (``types``, ``primaryType``,
``domain``, ``message``); ``EIP712Domain``, when ``types`` lacks it, is derived from the domain's fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from automaton_min.chain.address import is_address, keccak256
from automaton_min.chain.signing import sign_digest
from automaton_min.chain.wallet import Wallet

Types = Mapping[str, Sequence[Mapping[str, str]]]

DOMAIN_FIELDS = (
    ("name", "string"),
    ("version", "string"),
    ("chainId", "uint256"),
    ("verifyingContract", "address"),
    ("salt", "bytes32"),
)

_ARRAY = re.compile(r"(.+)\[(\d*)\]")
_INTEGER = re.compile(r"(u?)int(\d{1,3})")
_FIXED_BYTES = re.compile(r"bytes(\d{1,2})")
_HEX = re.compile(r"0x[0-9a-fA-F]*")


def encode_type(primary: str, types: Types) -> str:
    """``Name(type field,...)`` for ``primary`` followed by every struct it references, sorted by name."""
    referenced = sorted(_referenced_structs(primary, types, set()) - {primary})
    return "".join(_struct_signature(name, types) for name in [primary, *referenced])


def _struct_signature(name: str, types: Types) -> str:
    members = ",".join(f"{field['type']} {field['name']}" for field in types[name])
    return f"{name}({members})"


def _referenced_structs(type_name: str, types: Types, found: set[str]) -> set[str]:
    base = _element_type(type_name)
    if base in types and base not in found:
        found.add(base)
        for field in types[base]:
            _referenced_structs(field["type"], types, found)
    return found


def _element_type(type_name: str) -> str:
    while match := _ARRAY.fullmatch(type_name):
        type_name = match.group(1)
    return type_name


def type_hash(primary: str, types: Types) -> bytes:
    return keccak256(encode_type(primary, types).encode("utf-8"))


def hash_struct(primary: str, data: Mapping[str, Any], types: Types) -> bytes:
    """keccak256(typeHash || encodeData(data))."""
    if primary not in types:
        raise ValueError(f"unknown struct type {primary!r}")
    if not isinstance(data, Mapping):
        raise ValueError(f"{primary}: expected an object")
    parts = [type_hash(primary, types)]
    for field in types[primary]:
        if field["name"] not in data:
            raise ValueError(f"{primary}.{field['name']}: missing")
        parts.append(encode_value(field["type"], data[field["name"]], types))
    return keccak256(b"".join(parts))


def encode_value(type_name: str, value: Any, types: Types) -> bytes:
    """The 32-byte ``encodeData`` word for one value of ``type_name``."""
    if match := _ARRAY.fullmatch(type_name):
        element, length = match.group(1), match.group(2)
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{type_name}: expected a list")
        if length and len(value) != int(length):
            raise ValueError(f"{type_name}: expected {length} items, got {len(value)}")
        return keccak256(b"".join(encode_value(element, item, types) for item in value))
    if type_name in types:
        return hash_struct(type_name, value, types)
    if type_name == "string":
        if not isinstance(value, str):
            raise ValueError("string: expected text")
        return keccak256(value.encode("utf-8"))
    if type_name == "bytes":
        return keccak256(_as_bytes(value, type_name))
    if type_name == "bool":
        if value not in (True, False, 0, 1):
            raise ValueError(f"bool: expected true or false, got {value!r}")
        return int(bool(value)).to_bytes(32, "big")
    if type_name == "address":
        return _address_bytes(value).rjust(32, b"\0")
    if match := _INTEGER.fullmatch(type_name):
        return _encode_integer(type_name, value, signed=not match.group(1), bits=int(match.group(2)))
    if match := _FIXED_BYTES.fullmatch(type_name):
        size = int(match.group(1))
        if not 1 <= size <= 32:
            raise ValueError(f"{type_name}: not a valid type")
        raw = _as_bytes(value, type_name)
        if len(raw) > size:
            raise ValueError(f"{type_name}: expected at most {size} bytes, got {len(raw)}")
        return raw.ljust(32, b"\0")
    raise ValueError(f"unknown type {type_name!r}")


def _encode_integer(type_name: str, value: Any, *, signed: bool, bits: int) -> bytes:
    if bits % 8 or not 8 <= bits <= 256:
        raise ValueError(f"{type_name}: not a valid type")
    number = _as_int(value, type_name)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= number <= high:
        raise ValueError(f"{type_name}: {number} is out of range")
    return (number % (1 << 256)).to_bytes(32, "big")


def _as_int(value: Any, type_name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{type_name}: expected a number, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text, 10)
        except ValueError:
            pass
    raise ValueError(f"{type_name}: expected a whole number, got {value!r}")


def _as_bytes(value: Any, type_name: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str) and _HEX.fullmatch(value) and len(value) % 2 == 0:
        return bytes.fromhex(value[2:])
    raise ValueError(f"{type_name}: expected bytes or 0x-prefixed hex")


def _address_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)) and len(value) == 20:
        return bytes(value)
    if isinstance(value, str) and is_address(value):
        return bytes.fromhex(value[2:])
    raise ValueError(f"address: expected a 0x-prefixed 40-hex-digit address, got {value!r}")


def domain_types(domain: Mapping[str, Any]) -> list[dict[str, str]]:
    """The ``EIP712Domain`` fields for the keys present in ``domain``, in the standard order."""
    unknown = set(domain) - {name for name, _ in DOMAIN_FIELDS}
    if unknown:
        raise ValueError(f"EIP712Domain: unknown fields {sorted(unknown)}")
    return [{"name": name, "type": kind} for name, kind in DOMAIN_FIELDS if name in domain]


def domain_separator(domain: Mapping[str, Any], types: Types | None = None) -> bytes:
    """hashStruct(EIP712Domain, domain)."""
    fields = (types or {}).get("EIP712Domain") or domain_types(domain)
    return hash_struct("EIP712Domain", domain, {**(types or {}), "EIP712Domain": fields})


def typed_data_digest(typed_data: Mapping[str, Any]) -> bytes:
    """keccak256(0x19 0x01 || domainSeparator || hashStruct(message)): what gets signed."""
    types = typed_data["types"]
    primary = typed_data["primaryType"]
    separator = domain_separator(typed_data["domain"], types)
    if primary == "EIP712Domain":
        return keccak256(b"\x19\x01" + separator)
    return keccak256(b"\x19\x01" + separator + hash_struct(primary, typed_data["message"], types))


def sign_typed_data(wallet: Wallet, typed_data: Mapping[str, Any]) -> str:
    """The ``0x`` hex signature (r || s || v) of EIP-712 ``typed_data``."""
    return "0x" + sign_digest(wallet, typed_data_digest(typed_data)).hex()
