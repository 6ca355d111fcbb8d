"""Hints a new user follows: they name ``--home`` when it was given, do not go round in circles, name the
URL and the setting behind a network error, and come as a JSON object under ``--json``."""

from __future__ import annotations

import json
import shlex
import socket

import pytest

from automaton_min.errors import EXIT_FAILURE, EXIT_USAGE
from automaton_min.home import Home

from conftest import CREATOR


def closed_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def edit_config(home: Home, **changes) -> None:
    data = json.loads(home.config_path.read_text())
    data.update(changes)
    home.config_path.write_text(json.dumps(data))


def one_line(result, code: int) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == code, (result.code, result.stderr)
    lines = [line for line in result.stderr_lines if line.startswith("Error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# --------------------------------------------------------------------------- --home in hints


@pytest.mark.parametrize("args", [("status",), ("logs",), ("config", "show")], ids=" ".join)
def test_a_hint_names_the_home_given_with_the_flag(cli, tmp_path, args):
    other = tmp_path / "my agent"
    line = one_line(cli("--home", str(other), *args), EXIT_USAGE)
    assert f"automaton-min --home {shlex.quote(str(other))} setup" in line


def test_only_suggested_commands_get_the_home_not_paths_that_end_in_the_programs_name(tmp_path):
    from automaton_min.cli.common import repeat_home

    text = ("/usr/local/bin/automaton-min is not an executable file; ./automaton-min run is not either; "
            "run: automaton-min service install, then automaton-min status")
    home = tmp_path / "h"
    assert repeat_home(text, home) == (
        "/usr/local/bin/automaton-min is not an executable file; ./automaton-min run is not either; "
        f"run: automaton-min --home {home} service install, then automaton-min --home {home} status")


def test_a_hint_for_the_home_from_the_environment_stays_short(cli, home):
    line = one_line(cli("status"), EXIT_USAGE)
    assert "run: automaton-min setup" in line and "--home" not in line


def test_a_missing_database_hint_names_the_home(cli, set_up):
    set_up.default_db_path.unlink()
    line = one_line(cli("--home", str(set_up.root), "status"), EXIT_FAILURE)
    assert f"automaton-min --home {shlex.quote(str(set_up.root))} setup" in line


def test_doctor_fixes_name_the_home(cli, tmp_path):
    other = tmp_path / "elsewhere"
    report = json.loads(cli("--home", str(other), "doctor", "--json").stdout)
    assert any(f"--home {other}" in check["fix"] for check in report["checks"])


# --------------------------------------------------------------------------- no circles


def test_invalid_json_gets_one_fix_from_every_command(cli, set_up):
    set_up.config_path.write_text('{"name": "ada",')
    fixes = []
    for args in (("status",), ("config", "show"), ("setup", "--yes")):
        line = one_line(cli(*args), EXIT_USAGE)
        assert "not valid JSON" in line
        fixes.append(line.split("; ", 1)[1])
    assert len(set(fixes)) == 1, fixes
    assert "move" in fixes[0] and "automaton-min setup" in fixes[0]  # setup accepts the home once the file is aside
    doctor = json.loads(cli("doctor", "--json").stdout)
    config = next(c for c in doctor["checks"] if c["name"] == "config")
    assert "move it aside" in config["fix"]

    set_up.config_path.rename(set_up.root / "automaton.json.broken")
    assert cli("setup", "--name", "ada", "--genesis-prompt", "Again.", "--creator-address", CREATOR, "--yes").code == 0


# --------------------------------------------------------------------------- network errors


def test_wallet_network_error_names_the_url_and_rpc_url(cli, set_up):
    url = closed_url()
    edit_config(set_up, rpcUrl=url)
    line = one_line(cli("wallet"), EXIT_FAILURE)
    assert url in line and "rpcUrl" in line


def test_wallet_json_error_is_a_json_object(cli, set_up):
    url = closed_url()
    edit_config(set_up, rpcUrl=url)
    result = cli("wallet", "--json")
    assert result.code == EXIT_FAILURE
    error = json.loads(result.stdout)
    assert set(error) == {"error", "fix"}
    assert url in error["error"] and "rpcUrl" in error["fix"]
    assert "Error:" not in result.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_topup_network_error_names_the_url_and_rpc_url(cli, set_up, as_json):
    url = closed_url()
    edit_config(set_up, rpcUrl=url)
    result = cli("topup", "5", *(["--json"] if as_json else []))
    if as_json:
        assert result.code == EXIT_FAILURE
        error = json.loads(result.stdout)
        assert url in error["error"] and "rpcUrl" in error["fix"]
    else:
        line = one_line(result, EXIT_FAILURE)
        assert url in line and "rpcUrl" in line


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_provision_network_error_names_the_url_and_conway_api_url(cli, set_up, as_json):
    url = closed_url()
    edit_config(set_up, conwayApiUrl=url)
    result = cli("provision", *(["--json"] if as_json else []))
    if as_json:
        assert result.code == EXIT_FAILURE
        error = json.loads(result.stdout)
        assert url in error["error"] and "conwayApiUrl" in error["fix"]
    else:
        line = one_line(result, EXIT_FAILURE)
        assert url in line and "conwayApiUrl" in line
    assert not set_up.api_key_path.exists()


# --------------------------------------------------------------------------- no relay


def test_an_empty_social_relay_url_means_no_relay(cli, set_up):
    edit_config(set_up, socialRelayUrl="")
    assert cli("status").code == 0
    shown = json.loads(cli("config", "show").stdout)
    assert shown["socialRelayUrl"] == ""
    assert cli("doctor").code == 0
