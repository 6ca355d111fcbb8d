"""Fuzz automaton.json: any bytes in the file give ConfigError (a UserError) with one line, never another exception."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automaton_min.config import RULES, load_config
from automaton_min.errors import ConfigError, UserError
from automaton_min.home import Home

from conftest import CREATOR

MINIMAL = {"name": "ada", "genesisPrompt": "Earn your keep.", "creatorAddress": CREATOR}
KEYS = sorted({key.split(".")[0] for key in RULES}) + ["unknownKey"]
SUBKEYS = sorted({key.split(".")[1] for key in RULES if "." in key})

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=50)
           | st.sampled_from(["", " ", "a" * 5000, "x" * 200_000, "UTC", "Europe/", "../etc", "/etc", "0x" + "g" * 40,
                              "http://", "https://a b", "\x00", "\ud800"]))
garbage = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(SUBKEYS + ["zz"]) | st.text(max_size=5), inner, max_size=4),
                       max_leaves=12)
configs = st.dictionaries(st.sampled_from(KEYS), garbage, max_size=6).map(lambda d: {**MINIMAL, **d})
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _dump(value) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:  # a lone surrogate: write it escaped, as a hand-edited file could
        import json
        return json.dumps(value).encode()


def _load(home: Home, raw: bytes):
    home.ensure()
    home.config_path.write_bytes(raw)
    try:
        return load_config(home, environ={})
    except ConfigError as exc:
        assert isinstance(exc, UserError)
        assert "\n" not in str(exc) and str(exc).strip()
        return exc


@SETTINGS
@given(configs)
def test_random_objects_load_or_raise_config_error_naming_a_key(home: Home, data) -> None:
    outcome = _load(home, _dump(data))
    if isinstance(outcome, ConfigError):
        message = str(outcome)
        assert any(key.split(".")[-1] in message for key in RULES) or "expected an object" in message or "is not valid JSON" in message, message


@SETTINGS
@given(st.binary(max_size=300) | garbage.map(_dump) | st.sampled_from([b"", b"\xff\xfe{}", b'{"name": "\xff"}',
                                                                         b"[" * 100_000, b"null", b"[]", b"1e999"]))
def test_random_bytes_never_raise_anything_but_config_error(home: Home, raw: bytes) -> None:
    _load(home, raw)


@pytest.mark.parametrize("zone", ["a" * 5000, "Europe/" + "b" * 300])
def test_a_time_zone_too_long_for_a_file_name_is_a_config_error(home: Home, zone: str) -> None:
    """Regression: ZoneInfo raised OSError (File name too long), which escaped as a traceback."""
    outcome = _load(home, orjson.dumps({**MINIMAL, "heartbeatTimezone": zone}))
    assert isinstance(outcome, ConfigError)
    assert "heartbeatTimezone" in str(outcome)


@pytest.mark.parametrize("raw", [b"\xff\xfe{", orjson.dumps({**MINIMAL, "heartbeatTimezone": "a" * 5000}),
                                 orjson.dumps({**MINIMAL, "treasuryPolicy": [1, {"a": None}]}), b"[1, 2]"])
def test_the_cli_reports_a_bad_config_in_one_line_with_exit_2(home: Home, cli, raw: bytes) -> None:
    home.ensure()
    home.config_path.write_bytes(raw)
    result = cli("status")
    assert result.code == 2, result
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr_lines) == 1, result.stderr
