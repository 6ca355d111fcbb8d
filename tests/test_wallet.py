"""The EVM wallet: addresses against eth-account (the oracle), the reference file format, refusals, and key secrecy."""

from __future__ import annotations

import copy
import io
import logging
import os
import pickle
import re
import secrets
import stat
import subprocess
import sys
import traceback
from pathlib import Path

import orjson
import pytest
from eth_account import Account
from hypothesis import given, settings
from hypothesis import strategies as st

from automaton_min.chain import wallet as wallet_module
from automaton_min.chain.wallet import (
    SECP256K1_ORDER,
    Wallet,
    create_wallet,
    ensure_wallet,
    load_wallet,
    new_private_key,
)
from automaton_min.errors import UserError, WalletError
from automaton_min.home import Home
from automaton_min import log as log_module
from automaton_min.log import ROOT_LOGGER, configure_logging, register_secret, scrub

from conftest import CREATOR

STORED_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


# ---------------------------------------------------------------- helpers


def key_forms(key_hex: str) -> list[str]:
    """The spellings of a key that must never appear: with/without 0x, lower/upper case."""
    bare = key_hex.lower().removeprefix("0x")
    return [bare, bare.upper(), "0x" + bare, "0x" + bare.upper(), "0X" + bare.upper()]


def assert_no_key(text: str, key_hex: str, where: str = "") -> None:
    """No spelling of the key at all: checked case-insensitively, so mixed case is covered too."""
    bare = key_hex.lower().removeprefix("0x")
    assert len(bare) == 64
    assert bare not in text.lower(), f"private key leaked {where}"
    for form in key_forms(key_hex):
        assert form not in text, f"private key leaked {where}"


def random_key_hex() -> str:
    return "0x" + new_private_key().hex()


def write_wallet_file(path: Path, document: object, mode: int = 0o600, *, raw: bytes | None = None) -> bytes:
    """Write a wallet file the way something other than this package would; return its bytes."""
    data = raw if raw is not None else orjson.dumps(document)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    return data


@pytest.fixture
def wallet_path(home: Home) -> Path:
    home.ensure()
    return home.wallet_path


@pytest.fixture
def captured_logs():
    """Route the package's logs (debug, JSON lines) into a StringIO; restore the logger afterwards."""
    root = logging.getLogger(ROOT_LOGGER)
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    configure_logging("debug", stream, json_lines=True)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])
    root.propagate = saved[2]


# ---------------------------------------------------------------- addresses against the oracle


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=SECP256K1_ORDER - 1))
def test_address_matches_eth_account(secret: int) -> None:
    key = secret.to_bytes(32, "big")
    assert Wallet(key).address == Account.from_key(key).address


@pytest.mark.parametrize("secret", [1, 2, SECP256K1_ORDER - 1, SECP256K1_ORDER >> 1])
def test_address_matches_eth_account_at_edges(secret: int) -> None:
    key = secret.to_bytes(32, "big")
    assert Wallet(key).address == Account.from_key(key).address


def test_new_private_key_is_fresh_and_valid() -> None:
    keys = {new_private_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert len(key) == 32 and 0 < int.from_bytes(key, "big") < SECP256K1_ORDER


def test_new_private_key_retries_out_of_range_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    good = (5).to_bytes(32, "big")
    draws = iter([b"\x00" * 32, SECP256K1_ORDER.to_bytes(32, "big"), b"\xff" * 32, good])
    monkeypatch.setattr(wallet_module.secrets, "token_bytes", lambda n: next(draws))
    assert new_private_key() == good


@pytest.mark.parametrize("bad", [b"", b"\x01" * 31, b"\x01" * 33, b"\x00" * 32, SECP256K1_ORDER.to_bytes(32, "big"), b"\xff" * 32])
def test_wallet_rejects_invalid_key_bytes(bad: bytes) -> None:
    with pytest.raises(WalletError) as info:
        Wallet(bad)
    if bad:
        assert bad.hex() not in str(info.value).lower()


# ---------------------------------------------------------------- created wallet.json


def test_created_wallet_file_format(wallet_path: Path, clock) -> None:
    wallet = create_wallet(wallet_path, clock)
    assert stat.S_IMODE(os.stat(wallet_path).st_mode) == 0o600
    document = orjson.loads(wallet_path.read_bytes())
    assert set(document) == {"chainType", "privateKey", "createdAt"}
    assert document["chainType"] == "evm"
    assert re.fullmatch(r"0x[0-9a-fA-F]{64}", document["privateKey"])
    assert document["createdAt"] == "2026-11-22T10:15:30.250Z"
    assert STORED_ISO.fullmatch(document["createdAt"])
    assert Account.from_key(document["privateKey"]).address == wallet.address
    assert wallet.created_at == document["createdAt"]
    assert wallet.path == wallet_path
    assert wallet.key_bytes() == bytes.fromhex(document["privateKey"][2:])
    # What was written loads back to the same account.
    assert load_wallet(wallet_path).address == wallet.address


def test_created_wallet_uses_the_injected_clock(wallet_path: Path, clock) -> None:
    clock.advance(86_400_000 + 1)
    create_wallet(wallet_path, clock)
    assert orjson.loads(wallet_path.read_bytes())["createdAt"] == "2026-11-23T10:15:30.251Z"


def test_created_wallet_mode_ignores_a_permissive_umask(wallet_path: Path, clock) -> None:
    old = os.umask(0)
    try:
        create_wallet(wallet_path, clock)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(wallet_path).st_mode) == 0o600


def test_two_created_wallets_differ(tmp_path: Path, clock) -> None:
    first = create_wallet(tmp_path / "a.json", clock)
    second = create_wallet(tmp_path / "b.json", clock)
    assert first.address != second.address


# ---------------------------------------------------------------- reference-written files load unchanged


def _reference_variants(key_hex: str) -> dict[str, bytes]:
    """wallet.json as the TypeScript runtime writes it (JSON.stringify(data, null, 2)), old and new."""
    return {
        "with-chainType": (
            '{\n  "chainType": "evm",\n  "privateKey": "%s",\n  "createdAt": "2025-02-19T08:41:07.123Z"\n}' % key_hex
        ).encode(),
        "without-chainType": ('{\n  "privateKey": "%s",\n  "createdAt": "2025-01-03T23:59:59.000Z"\n}' % key_hex).encode(),
        "uppercase-hex": ('{"privateKey":"0x%s","createdAt":"2025-01-03T23:59:59.000Z"}' % key_hex[2:].upper()).encode(),
        "extra-keys": (
            '{"chainType":"evm","privateKey":"%s","createdAt":"2025-01-03T23:59:59.000Z","note":"x"}' % key_hex
        ).encode(),
    }


@pytest.mark.parametrize("variant", ["with-chainType", "without-chainType", "uppercase-hex", "extra-keys"])
@pytest.mark.parametrize("loader", ["load", "ensure"])
def test_reference_wallet_loads_unchanged(wallet_path: Path, variant: str, loader: str, clock) -> None:
    key_hex = random_key_hex()
    data = write_wallet_file(wallet_path, None, raw=_reference_variants(key_hex)[variant])
    old_ns = 1_600_000_000_123_456_789
    os.utime(wallet_path, ns=(old_ns, old_ns))
    before = os.stat(wallet_path)

    if loader == "load":
        wallet = load_wallet(wallet_path)
    else:
        wallet, created = ensure_wallet(wallet_path, clock)
        assert created is False

    assert wallet.address == Account.from_key(key_hex).address
    assert wallet.key_bytes() == bytes.fromhex(key_hex[2:])
    assert wallet.created_at == orjson.loads(data)["createdAt"]
    after = os.stat(wallet_path)
    assert wallet_path.read_bytes() == data
    assert after.st_mtime_ns == before.st_mtime_ns == old_ns
    assert after.st_ino == before.st_ino
    assert stat.S_IMODE(after.st_mode) == 0o600
    assert sorted(os.listdir(wallet_path.parent)) == ["wallet.json"]  # no temp or backup file


def test_wallet_without_created_at_loads(wallet_path: Path) -> None:
    key_hex = random_key_hex()
    write_wallet_file(wallet_path, {"privateKey": key_hex})
    wallet = load_wallet(wallet_path)
    assert wallet.address == Account.from_key(key_hex).address
    assert wallet.created_at is None


# ---------------------------------------------------------------- no overwrite; ensure is idempotent


def test_create_wallet_never_overwrites(wallet_path: Path, clock) -> None:
    key_hex = random_key_hex()
    original = write_wallet_file(wallet_path, {"chainType": "evm", "privateKey": key_hex, "createdAt": "2025-01-01T00:00:00.000Z"})
    with pytest.raises(FileExistsError):
        create_wallet(wallet_path, clock)
    assert wallet_path.read_bytes() == original
    assert sorted(os.listdir(wallet_path.parent)) == ["wallet.json"]


def test_create_wallet_never_overwrites_even_a_broken_file(wallet_path: Path, clock) -> None:
    original = write_wallet_file(wallet_path, None, raw=b"not json at all")
    with pytest.raises(FileExistsError):
        create_wallet(wallet_path, clock)
    assert wallet_path.read_bytes() == original


def test_ensure_wallet_creates_then_keeps(wallet_path: Path, clock) -> None:
    first, created = ensure_wallet(wallet_path, clock)
    assert created is True
    data = wallet_path.read_bytes()
    for _ in range(3):
        clock.advance(1000)
        again, created = ensure_wallet(wallet_path, clock)
        assert created is False
        assert again.address == first.address
    assert wallet_path.read_bytes() == data


def test_ensure_wallet_keeps_an_existing_file(wallet_path: Path, clock) -> None:
    key_hex = random_key_hex()
    data = write_wallet_file(wallet_path, {"chainType": "evm", "privateKey": key_hex, "createdAt": "2025-01-01T00:00:00.000Z"})
    addresses = set()
    for _ in range(3):
        wallet, created = ensure_wallet(wallet_path, clock)
        assert created is False
        addresses.add(wallet.address)
    assert addresses == {Account.from_key(key_hex).address}
    assert wallet_path.read_bytes() == data


def test_ensure_wallet_loses_a_creation_race_gracefully(wallet_path: Path, clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process writes wallet.json between our exists() check and our write: we load theirs."""
    key_hex = random_key_hex()
    real_create = wallet_module.create_wallet

    def racing_create(path, now):
        write_wallet_file(path, {"chainType": "evm", "privateKey": key_hex, "createdAt": "2025-01-01T00:00:00.000Z"})
        return real_create(path, now)

    monkeypatch.setattr(wallet_module, "create_wallet", racing_create)
    wallet, created = ensure_wallet(wallet_path, clock)
    assert created is False
    assert wallet.address == Account.from_key(key_hex).address


def test_ensure_wallet_does_not_hide_a_broken_file(wallet_path: Path, clock) -> None:
    original = write_wallet_file(wallet_path, None, raw=b"{")
    with pytest.raises(WalletError):
        ensure_wallet(wallet_path, clock)
    assert wallet_path.read_bytes() == original


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o601, 0o610])
def test_wallet_open_to_others_is_refused(wallet_path: Path, mode: int) -> None:
    key_hex = random_key_hex()
    write_wallet_file(wallet_path, {"chainType": "evm", "privateKey": key_hex, "createdAt": "2025-01-01T00:00:00.000Z"}, mode)
    with pytest.raises(WalletError) as info:
        load_wallet(wallet_path)
    message = str(info.value)
    assert f"chmod 600 {wallet_path}" in message
    assert f"{mode:04o}" in message
    assert_no_key(message, key_hex)
    assert stat.S_IMODE(os.stat(wallet_path).st_mode) == mode  # reported, not silently changed


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_wallet_private_to_owner_is_accepted(wallet_path: Path, mode: int) -> None:
    key_hex = random_key_hex()
    write_wallet_file(wallet_path, {"privateKey": key_hex}, mode)
    assert load_wallet(wallet_path).address == Account.from_key(key_hex).address


def test_solana_wallet_is_refused(wallet_path: Path) -> None:
    secret = "4" + "".join(secrets.choice("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz") for _ in range(86))
    write_wallet_file(wallet_path, {"chainType": "solana", "secretKey": secret, "createdAt": "2025-01-01T00:00:00.000Z"})
    with pytest.raises(WalletError) as info:
        load_wallet(wallet_path)
    message = str(info.value)
    assert "Solana" in message and "EVM" in message and "only" in message
    assert secret not in message


def test_unknown_chain_type_is_refused(wallet_path: Path) -> None:
    write_wallet_file(wallet_path, {"chainType": "bitcoin", "privateKey": random_key_hex()})
    with pytest.raises(WalletError, match="chainType"):
        load_wallet(wallet_path)


def _malformed_keys() -> dict[str, object]:
    good = new_private_key().hex()
    return {
        "short": "0x" + good[:63],
        "long": "0x" + good + "a",
        "non-hex": "0x" + good[:63] + "g",
        "no-0x": good,
        "0X-prefix": "0X" + good,
        "zero": "0x" + "0" * 64,
        "order": "0x%064x" % SECP256K1_ORDER,
        "above-order": "0x%064x" % (SECP256K1_ORDER + 7),
        "all-ff": "0x" + "f" * 64,
        "trailing-newline": "0x" + good + "\n",
        "inner-space": "0x" + good[:32] + " " + good[32:63],
        "number": 123456789,
        "list": ["0x" + good],
        "null": None,
    }


MALFORMED = list(_malformed_keys())


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_private_key_is_refused_without_echo(wallet_path: Path, case: str) -> None:
    bad = _malformed_keys()[case]
    write_wallet_file(wallet_path, {"chainType": "evm", "privateKey": bad, "createdAt": "2025-01-01T00:00:00.000Z"})
    with pytest.raises(WalletError) as info:
        load_wallet(wallet_path)
    message = str(info.value)
    assert "privateKey" in message
    if bad is not None:
        text = str(bad).lower().removeprefix("0x").strip()
        # the bad value, and any long piece of it, stays out of the message
        for piece in (text, text[:32], text[-32:]):
            assert piece not in message.lower()
        assert "0" * 32 not in message


def test_missing_private_key_is_refused(wallet_path: Path) -> None:
    write_wallet_file(wallet_path, {"chainType": "evm", "createdAt": "2025-01-01T00:00:00.000Z"})
    with pytest.raises(WalletError, match="privateKey"):
        load_wallet(wallet_path)


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"not json", b'{"privateKey": "0x', b"\xff\xfe", b'{"privateKey":"0x%s",}'],
    ids=["empty", "open-brace", "text", "truncated", "binary", "trailing-comma"],
)
def test_invalid_json_is_refused(wallet_path: Path, raw: bytes) -> None:
    if b"%s" in raw:
        raw = raw.replace(b"%s", new_private_key().hex().encode())
    write_wallet_file(wallet_path, None, raw=raw)
    with pytest.raises(WalletError, match="not valid JSON"):
        load_wallet(wallet_path)


@pytest.mark.parametrize("document", [[], ["0x" + "1" * 64], "0x" + "1" * 64, 42, None])
def test_non_object_json_is_refused(wallet_path: Path, document: object) -> None:
    write_wallet_file(wallet_path, document)
    with pytest.raises(WalletError, match="expected a JSON object") as info:
        load_wallet(wallet_path)
    assert "1" * 64 not in str(info.value)


def test_missing_wallet_is_a_user_error(wallet_path: Path) -> None:
    with pytest.raises(WalletError, match="automaton-min init") as info:
        load_wallet(wallet_path)
    assert isinstance(info.value, UserError)
    assert info.value.exit_code == 2


# ---------------------------------------------------------------- the key never leaks


def test_repr_and_str_show_the_address_not_the_key(wallet_path: Path, clock) -> None:
    wallet = create_wallet(wallet_path, clock)
    key_hex = "0x" + wallet.key_bytes().hex()
    renderings = [repr(wallet), str(wallet), f"{wallet}", f"{wallet!r}", f"{wallet!s}", "%s %r" % (wallet, wallet),
                  format(wallet, ""), repr([wallet]), str({"w": wallet}), repr(load_wallet(wallet_path))]
    for text in renderings:
        assert wallet.address in text
        assert_no_key(text, key_hex, f"in {text!r}")


def test_wallet_has_no_instance_dict() -> None:
    """With __slots__, vars() and __dict__ cannot dump the key by accident."""
    wallet = Wallet(new_private_key())
    with pytest.raises(TypeError):
        vars(wallet)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_wallet_cannot_be_pickled(protocol: int) -> None:
    wallet = Wallet(new_private_key())
    with pytest.raises(TypeError):
        pickle.dumps(wallet, protocol=protocol)


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_wallet_cannot_be_copied(copier) -> None:
    wallet = Wallet(new_private_key())
    with pytest.raises(TypeError):
        copier(wallet)
    if copier is copy.deepcopy:
        with pytest.raises(TypeError):
            copier({"nested": [wallet]})


def _provoke_every_wallet_error(directory: Path) -> tuple[list[str], list[str]]:
    """Raise each kind of WalletError with a key inside the file; return (keys, error texts incl. tracebacks)."""
    keys: list[str] = []
    texts: list[str] = []

    def attempt(name: str, raw: bytes, mode: int = 0o600) -> None:
        path = directory / name
        write_wallet_file(path, None, mode, raw=raw)
        with pytest.raises(WalletError) as info:
            load_wallet(path)
        texts.append(str(info.value))
        texts.append("".join(traceback.format_exception(info.value)))
        logging.getLogger(f"{ROOT_LOGGER}.test").error("wallet failed: %s", info.value, exc_info=info.value)

    def fresh() -> str:
        key_hex = random_key_hex()
        keys.append(key_hex)
        return key_hex

    for mode in (0o644, 0o640, 0o604):
        attempt(f"mode{mode:o}.json", orjson.dumps({"chainType": "evm", "privateKey": fresh()}), mode)
    attempt("truncated.json", b'{"chainType":"evm","privateKey":"%s"' % fresh().encode())
    attempt("comma.json", b'{"privateKey":"%s",}' % fresh().encode())
    attempt("list.json", orjson.dumps([fresh()]))
    attempt("string.json", orjson.dumps(fresh()))
    attempt("solana.json", orjson.dumps({"chainType": "solana", "secretKey": fresh()[2:], "privateKey": fresh()}))
    attempt("other-chain.json", orjson.dumps({"chainType": "tron", "privateKey": fresh()}))
    attempt("no-prefix.json", orjson.dumps({"privateKey": fresh()[2:]}))
    attempt("newline.json", orjson.dumps({"privateKey": fresh() + "\n"}))
    attempt("long.json", orjson.dumps({"privateKey": fresh() + "0"}))
    attempt("short.json", orjson.dumps({"privateKey": fresh()[:-1]}))
    attempt("non-hex.json", orjson.dumps({"privateKey": fresh()[:-1] + "x"}))
    order = "0x%064x" % SECP256K1_ORDER
    keys.append(order)
    attempt("order.json", orjson.dumps({"privateKey": order}))
    above = "0x%064x" % (SECP256K1_ORDER + 12345)
    keys.append(above)
    attempt("above.json", orjson.dumps({"privateKey": above}))
    with pytest.raises(WalletError) as info:
        load_wallet(directory / "missing.json")
    texts.append(str(info.value))
    return keys, texts


def test_no_key_in_logs_or_errors_even_without_the_scrubber(
    tmp_path: Path, clock, captured_logs: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first line of defence: nothing logs or raises a key, so the scrubber has nothing to catch."""
    monkeypatch.setattr(log_module, "scrub", lambda text: text)
    created = create_wallet(tmp_path / "created.json", clock)
    ensured, _ = ensure_wallet(tmp_path / "ensured.json", clock)
    ensure_wallet(tmp_path / "ensured.json", clock)
    reference_key = random_key_hex()
    write_wallet_file(tmp_path / "reference.json", {"privateKey": reference_key, "createdAt": "2025-01-01T00:00:00.000Z"})
    load_wallet(tmp_path / "reference.json")
    keys, texts = _provoke_every_wallet_error(tmp_path)
    keys += ["0x" + created.key_bytes().hex(), "0x" + ensured.key_bytes().hex(), reference_key]

    logs = captured_logs.getvalue()
    assert "created a new wallet" in logs and created.address in logs  # the capture works
    assert "wallet failed" in logs
    for key_hex in keys:
        assert_no_key(logs, key_hex, "in the logs")
        for text in texts:
            assert_no_key(text, key_hex, f"in {text!r}")


def test_no_key_in_logs_with_the_scrubber(tmp_path: Path, clock, captured_logs: io.StringIO) -> None:
    created = create_wallet(tmp_path / "created.json", clock)
    loaded = load_wallet(tmp_path / "created.json")
    keys, texts = _provoke_every_wallet_error(tmp_path)
    logs = captured_logs.getvalue()
    assert loaded.address in logs
    for key_hex in [*keys, "0x" + created.key_bytes().hex()]:
        assert_no_key(logs, key_hex, "in the logs")
        for text in texts:
            assert_no_key(text, key_hex)


@pytest.mark.parametrize("json_lines", [True, False], ids=["json", "text"])
def test_scrubber_redacts_a_loaded_key_that_reaches_a_log_line(wallet_path: Path, clock, json_lines: bool) -> None:
    """Defence in depth: even if code did log the key, every spelling of it is replaced."""
    key_hex = random_key_hex()
    write_wallet_file(wallet_path, {"privateKey": key_hex})
    load_wallet(wallet_path)  # loading registers the key with the scrubber
    bare = key_hex[2:]
    root = logging.getLogger(ROOT_LOGGER)
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    try:
        configure_logging("debug", stream, json_lines=json_lines)
        log = logging.getLogger(f"{ROOT_LOGGER}.leaky")
        log.debug("oops %s", key_hex)
        log.info("bare %s upper %s", bare, bare.upper())
        log.warning("in a field", extra={"key": "0x" + bare.upper(), "nested": {"k": bare}})
        try:
            raise RuntimeError(f"boom {key_hex}")
        except RuntimeError:
            log.exception("with traceback")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        root.propagate = saved[2]
    text = stream.getvalue()
    assert len(text.splitlines()) >= 4
    assert text.count("[redacted]") >= 6
    assert_no_key(text, key_hex, "past the scrubber")


def test_scrub_replaces_every_registered_form() -> None:
    secret = "0x" + secrets.token_hex(32)
    bare = secret[2:]
    line = f"a={secret} b={bare} c={bare.upper()} d=0x{bare.upper()} e=end"
    assert scrub(line) == line  # not registered yet: nothing to do
    register_secret(secret)
    cleaned = scrub(line)
    assert bare not in cleaned.lower()
    assert cleaned.startswith("a=[redacted] b=[redacted] c=[redacted] d=0x[redacted]")
    assert cleaned.endswith(" e=end")


def test_scrub_ignores_values_too_short_to_be_secrets() -> None:
    register_secret("0xab")
    register_secret("")
    assert scrub("0xab is fine and so is ab") == "0xab is fine and so is ab"


# ---------------------------------------------------------------- the CLI, as a real process


def test_cli_never_prints_the_key(cli, home: Home) -> None:
    runs = [
        cli("--log-level", "debug", "init"),
        cli("--log-level", "debug", "init"),
        cli("--log-level", "debug", "setup", "--name", "ada", "--genesis-prompt", "Earn your keep.",
            "--creator-address", CREATOR, "--yes"),
        cli("--log-level", "debug", "setup", "--yes", "--json"),
        cli("--log-level", "debug", "status"),
        cli("--log-level", "debug", "status", "--json"),
        cli("--log-level", "debug", "config", "show"),
        cli("--log-level", "debug", "doctor"),
        cli("--log-level", "debug", "doctor", "--json"),
    ]
    for result in runs:
        assert result.code == 0, result.stderr
    document = orjson.loads(home.wallet_path.read_bytes())
    key_hex = document["privateKey"]
    address = Account.from_key(key_hex).address
    assert orjson.loads(runs[0].stdout)["address"] == address
    assert orjson.loads(runs[0].stdout)["isNew"] is True
    assert orjson.loads(runs[1].stdout)["isNew"] is False
    assert orjson.loads(runs[5].stdout)["address"] == address
    assert any("created a new wallet" in r.stderr for r in runs)  # debug logging reached stderr
    for result in runs:
        assert_no_key(result.stdout, key_hex, "on stdout")
        assert_no_key(result.stderr, key_hex, "on stderr")


def test_cli_wallet_errors_never_print_the_key(cli, set_up: Home) -> None:
    path = set_up.wallet_path
    key_hex = orjson.loads(path.read_bytes())["privateKey"]
    os.chmod(path, 0o644)
    runs = [cli("--log-level", "debug", *args) for args in (["init"], ["status"], ["doctor"], ["doctor", "--json"])]
    assert runs[0].code == 2
    assert f"chmod 600 {path}" in runs[0].stderr
    assert runs[2].code != 0 and f"chmod 600 {path}" in runs[2].stdout + runs[2].stderr
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes()[:-3])  # truncated: invalid JSON that still holds the key
    runs += [cli("--log-level", "debug", *args) for args in (["init"], ["doctor"], ["doctor", "--json"])]
    assert runs[-3].code == 2 and "not valid JSON" in runs[-3].stderr
    for result in runs:
        assert_no_key(result.stdout, key_hex, "on stdout")
        assert_no_key(result.stderr, key_hex, "on stderr")


# ---------------------------------------------------------------- the stored address


def test_a_stored_address_is_taken_without_deriving_and_checked_at_the_first_signature(wallet_path: Path,
                                                                                       clock) -> None:
    """Loading takes the stored address as it is (a start derives nothing); the first signature derives the key's
    address once, and no signing library of anyone else's is imported for it."""
    created = create_wallet(wallet_path, clock)
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from automaton_min.chain import wallet as module\n"
        "derived = []\n"
        "real = module.public_key\n"
        "module.public_key = lambda key: derived.append(1) or real(key)\n"
        f"wallet = module.load_wallet(Path({str(wallet_path)!r}), {created.address!r})\n"
        "print(wallet.address, len(derived))\n"
        "wallet.signing_key()\n"
        "wallet.signing_key()\n"
        "print(len(derived), 'eth_keys' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [created.address, "0", "1", "False"]


def test_a_stored_address_that_is_not_the_keys_signs_nothing(wallet_path: Path, clock) -> None:
    from automaton_min.chain.signing import sign_digest

    create_wallet(wallet_path, clock)
    wrong = load_wallet(wallet_path, CREATOR)
    assert wrong.address == CREATOR
    with pytest.raises(WalletError, match="nothing was signed") as info:
        sign_digest(wrong, b"\x01" * 32)
    assert CREATOR in str(info.value) and load_wallet(wallet_path).address in str(info.value)
    right = load_wallet(wallet_path, load_wallet(wallet_path).address.lower())
    assert len(sign_digest(right, b"\x01" * 32)) == 65


def test_a_stored_address_must_look_like_one(wallet_path: Path, clock) -> None:
    create_wallet(wallet_path, clock)
    with pytest.raises(WalletError, match="stored wallet address"):
        load_wallet(wallet_path, "0x1234")
