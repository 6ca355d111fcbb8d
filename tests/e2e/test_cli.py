"""End-to-end tests of the ``automaton-min`` command line.

Every test runs the CLI as a real subprocess (``python -m automaton_min``) against
the private, not-yet-created home that ``conftest.home`` gives it, and checks what
a user sees: stdout, the single ``Error:`` line on stderr, exit codes, and the
files (and their modes) left in the home.

Exit-code contract: 0 success, 1 run-time failure, 2 usage or configuration error.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import apsw
import pytest

from automaton_min.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from automaton_min.home import Home

from conftest import CREATOR, CliResult
from terminal_kit import on_terminal

OPENAI_KEY = "sk-test-0123456789abcdefWXYZ"  # 28 chars: masked as ****WXYZ
CONWAY_KEY = "cwk-live-9876543210fedcbaQRST"  # 29 chars: masked as ****QRST
COMMANDS = ("init", "setup", "config", "status", "doctor")

FULL_SETUP_FLAGS = (
    "--name", "ada",
    "--genesis-prompt", "Earn your keep by summarising papers.",
    "--creator-address", CREATOR,
    "--creator-message", "Welcome to the world.",
    "--sandbox-id", "sbx-1234",
    "--conway-api-url", "https://api.example.test",
    "--openai-base-url", "http://127.0.0.1:8080/v1",
    "--inference-model", "qwen2.5-7b-instruct",
    "--openai-api-key", "-",  # read from standard input: a key on the command line is refused
)
FULL_SETUP_VALUES = {
    "name": "ada",
    "genesisPrompt": "Earn your keep by summarising papers.",
    "creatorAddress": CREATOR,
    "creatorMessage": "Welcome to the world.",
    "sandboxId": "sbx-1234",
    "conwayApiUrl": "https://api.example.test",
    "openaiBaseUrl": "http://127.0.0.1:8080/v1",
    "inferenceModel": "qwen2.5-7b-instruct",
    "openaiApiKey": OPENAI_KEY,
}


# --------------------------------------------------------------------------- helpers


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_json(path: Path, data: Any) -> None:
    """Rewrite a JSON file in place, keeping its mode."""
    path.write_text(json.dumps(data, indent=2))


def edit_config(home: Home, **changes: Any) -> None:
    data = read_json(home.config_path)
    data.update(changes)
    write_json(home.config_path, data)


def ok_json(result: CliResult) -> Any:
    """The JSON a successful command printed."""
    assert result.code == EXIT_OK, (result.code, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def assert_one_error_line(result: CliResult, code: int, *needles: str) -> str:
    """Exit ``code``; stderr is exactly one non-empty ``Error:`` line containing every needle."""
    assert "Traceback" not in result.stdout + result.stderr
    assert result.code == code, (result.code, result.stderr)
    assert len(result.stderr_lines) == 1, result.stderr
    line = result.stderr_lines[0]
    assert line.startswith("Error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def run_detached(*args: str, input: str) -> CliResult:
    """Run the CLI in a new session (no controlling terminal).

    Hidden prompts read through ``getpass``, which prefers ``/dev/tty`` over stdin;
    without a controlling terminal it reads the piped answers, as a test needs, instead
    of waiting on the terminal of whoever runs pytest.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "automaton_min", *args],
        input=input,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
        start_new_session=True,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def add_turns(home: Home, count: int, *, state: str | None = None, thinking_size: int = 20) -> list[str]:
    """Insert ``count`` turns straight into state.db (and optionally set ``agent_state``)."""
    timestamps = [f"2026-11-22T10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z" for i in range(count)]
    connection = apsw.Connection(str(home.default_db_path))
    try:
        with connection:
            for i, ts in enumerate(timestamps):
                connection.execute(
                    "INSERT INTO turns (id, timestamp, state, thinking) VALUES (?, ?, ?, ?)",
                    (f"turn-{i:05d}", ts, "running", "x" * thinking_size),
                )
            if state is not None:
                connection.execute(
                    "INSERT INTO kv (key, value) VALUES ('agent_state', ?)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (state,),
                )
    finally:
        connection.close()
    return timestamps


def overwrite_middle(path: Path, size: int = 8192) -> None:
    """Damage a database file by overwriting ``size`` bytes in its middle."""
    total = path.stat().st_size
    assert total > 4 * size, "fill the database first so the middle holds data"
    with open(path, "r+b") as handle:
        handle.seek(total // 2)
        handle.write(b"\xa5" * size)


def corrupt_table(home: Home, table: str) -> None:
    """Overwrite every page of ``table`` and its indexes (found with ``dbstat``) with junk."""
    connection = apsw.Connection(str(home.default_db_path))
    try:
        page_size = connection.execute("PRAGMA page_size").fetchall()[0][0]
        pages = [row[0] for row in connection.execute(
            "SELECT pageno FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = ?)", (table,))]
    finally:
        connection.close()
    assert len(pages) > 3
    with open(home.default_db_path, "r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * page_size)
            handle.write(b"\xa5" * page_size)


def garbage_db(home: Home) -> None:
    home.default_db_path.write_bytes(b"this is not a database, just some bytes\n" * 500)


def failing_checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"] if not check["ok"]}


# --------------------------------------------------------------------------- version, help, console script


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(cli, flag):
    result = cli(flag)
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == "automaton-min 0.1.0"
    assert result.stderr == ""


def test_help_lists_every_command(cli):
    result = cli("--help")
    assert result.code == 0, result.stderr
    commands_section = result.stdout.split("Commands:", 1)[1]
    listed = {line.split()[0] for line in commands_section.splitlines() if line.strip()}
    assert set(COMMANDS) <= listed
    for option in ("--version", "--home", "--log-level"):
        assert option in result.stdout


def test_subcommand_help(cli):
    result = cli("setup", "--help")
    assert result.code == 0
    for flag in ("--name", "--genesis-prompt", "--genesis-prompt-file", "--creator-address", "--yes", "--json"):
        assert flag in result.stdout


def test_installed_console_script_runs(home):
    script = Path(sys.executable).parent / "automaton-min"
    assert script.is_file(), f"console script missing at {script}"
    assert os.access(script, os.X_OK)
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "automaton-min 0.1.0"


# --------------------------------------------------------------------------- init


def test_init_creates_home_and_wallet(cli, home):
    assert not home.root.exists()
    first = ok_json(cli("init"))
    assert set(first) == {"address", "home", "isNew"}
    assert first["home"] == str(home.root)
    assert first["isNew"] is True
    assert first["address"].startswith("0x") and len(first["address"]) == 42
    assert mode_of(home.root) == 0o700
    assert mode_of(home.wallet_path) == 0o600
    wallet = read_json(home.wallet_path)
    assert wallet["chainType"] == "evm"

    second = ok_json(cli("init"))
    assert second == {**first, "isNew": False}
    assert read_json(home.wallet_path) == wallet


def test_init_never_prints_the_private_key(cli, home):
    result = cli("init")
    assert result.code == 0
    key = read_json(home.wallet_path)["privateKey"][2:].lower()
    assert key not in (result.stdout + result.stderr).lower()


def test_home_flag_overrides_env(cli, home, tmp_path):
    other = tmp_path / "elsewhere" / "agent"
    data = ok_json(cli("--home", str(other), "init"))
    assert data["home"] == str(other)
    assert (other / "wallet.json").is_file()
    assert mode_of(other) == 0o700
    assert not home.root.exists(), "AUTOMATON_HOME must not be touched when --home is given"


def test_home_flag_expands_tilde(cli, tmp_path):
    data = ok_json(cli("--home", "~/my-agent", "init"))
    expected = tmp_path / "user" / "my-agent"  # conftest points $HOME at tmp_path/user
    assert data["home"] == str(expected)
    assert (expected / "wallet.json").is_file()


def test_init_tightens_an_open_home_directory(cli, home):
    home.root.mkdir(mode=0o755)
    os.chmod(home.root, 0o755)
    assert ok_json(cli("init"))["isNew"] is True
    assert mode_of(home.root) == 0o700


# --------------------------------------------------------------------------- setup, non-interactive


def test_setup_with_every_flag(cli, home):
    data = ok_json(cli("setup", *FULL_SETUP_FLAGS, "--yes", "--json", input=OPENAI_KEY))
    assert set(data) == {"name", "address", "home", "walletCreated", "written"}
    assert data["name"] == "ada"
    assert data["home"] == str(home.root)
    assert data["walletCreated"] is True
    assert {"automaton.json", "SOUL.md", "constitution.md", "state.db"} <= set(data["written"])
    assert OPENAI_KEY not in json.dumps(data)

    assert mode_of(home.root) == 0o700
    assert mode_of(home.config_path) == 0o600
    assert mode_of(home.wallet_path) == 0o600
    assert mode_of(home.soul_path) == 0o600
    assert mode_of(home.constitution_path) == 0o444

    config = read_json(home.config_path)
    for key, value in FULL_SETUP_VALUES.items():
        assert config[key] == value, key
    assert config["walletAddress"] == data["address"]
    assert config["modelStrategy"]["inferenceModel"] == "qwen2.5-7b-instruct"

    soul = home.soul_path.read_text()
    assert soul.startswith("# ada\n")
    assert "Name: ada" in soul
    assert data["address"] in soul
    assert CREATOR in soul
    assert "Earn your keep by summarising papers." in soul
    assert "Constitution" in home.constitution_path.read_text()

    # The address setup reports is the wallet's: init agrees.
    assert ok_json(cli("init")) == {"address": data["address"], "home": str(home.root), "isNew": False}


def test_setup_text_output_names_the_next_step(cli, home):
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Earn.", "--creator-address", CREATOR, "--yes")
    assert result.code == 0, result.stderr
    address = read_json(home.config_path)["walletAddress"]
    assert f"ada is set up in {home.root}" in result.stdout
    # No key and no server of one's own: Conway serves the default model, once provisioned and paid
    assert result.stdout.splitlines()[-1] == (
        f"Next, with gpt-5.2 through Conway: automaton-min provision (a Conway API key), fund {address} with USDC "
        "on Base (it pays for its model), then automaton-min run (Ctrl-C stops it), and in another terminal "
        "automaton-min logs -f")

    keyed = cli("setup", "--conway-api-key", "-", "--yes", input=CONWAY_KEY)  # a Conway key already: fund, then run
    assert keyed.code == 0, keyed.stderr
    assert keyed.stdout.splitlines()[-1].startswith(f"Next, with gpt-5.2 through Conway: fund {address} with USDC")


def test_setup_for_a_local_model_says_run_and_repeats_home(cli, tmp_path):
    other = tmp_path / "other-home"
    result = cli("--home", str(other), "setup", "--name", "ada", "--genesis-prompt", "Earn.", "--creator-address",
                 CREATOR, "--openai-base-url", "http://127.0.0.1:8089/v1", "--inference-model", "gemma-3-270m", "--yes")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"Next, with gemma-3-270m on your own server: automaton-min --home {other} run (Ctrl-C stops it), and in "
        f"another terminal automaton-min --home {other} logs -f")
    assert "USDC" not in result.stdout and "provision" not in result.stdout
    # No model named: the one the server lists, as the wizard offers it; a server that does not answer: refused
    from standins.model_servers import OpenAIServer

    with OpenAIServer(mode="llamacpp", models=[{"id": "gemma-served", "object": "model"}]) as server:
        served = cli("--home", str(tmp_path / "third"), "setup", "--name", "ada", "--genesis-prompt", "Earn.",
                     "--creator-address", CREATOR, "--openai-base-url", server.url, "--yes")
    assert served.stdout.splitlines()[-1].startswith("Next, with gemma-served on your own server: automaton-min")
    unnamed = cli("--home", str(tmp_path / "fourth"), "setup", "--name", "ada", "--genesis-prompt", "Earn.",
                  "--creator-address", CREATOR, "--openai-base-url", "http://127.0.0.1:9/v1", "--yes")
    assert unnamed.code == 2 and unnamed.stderr.count("\n") == 1, unnamed.stderr
    assert "http://127.0.0.1:9/v1 does not answer" in unnamed.stderr and "--inference-model" in unnamed.stderr
    assert not (tmp_path / "fourth" / "automaton.json").exists()


def test_setup_keeps_an_existing_wallet(cli, home):
    address = ok_json(cli("init"))["address"]
    data = ok_json(cli("setup", "--name", "ada", "--genesis-prompt", "g", "--creator-address", CREATOR, "--yes", "--json"))
    assert data["walletCreated"] is False
    assert data["address"] == address
    assert read_json(home.config_path)["walletAddress"] == address


def test_setup_genesis_prompt_file(cli, home, tmp_path):
    prompt = "Line one of the purpose.\n\nLine two: sell summaries for USDC.\n"
    prompt_file = tmp_path / "genesis.txt"
    prompt_file.write_text(prompt)
    result = cli("setup", "--name", "ada", "--genesis-prompt-file", str(prompt_file), "--creator-address", CREATOR, "--yes")
    assert result.code == 0, result.stderr
    assert read_json(home.config_path)["genesisPrompt"] == prompt
    assert "Line two: sell summaries for USDC." in home.soul_path.read_text()


def test_setup_rerun_changes_one_value_and_keeps_the_rest(cli, home):
    first = ok_json(cli("setup", *FULL_SETUP_FLAGS, "--yes", "--json", input=OPENAI_KEY))
    config = read_json(home.config_path)
    config["myOwnNote"] = {"keep": ["me", 1]}
    config["treasuryPolicy"]["myOwnLimitCents"] = 42
    config["maxTurnsPerCycle"] = 7
    write_json(home.config_path, config)
    home.soul_path.write_text("# ada\n\nI rewrote my own soul.\n")

    second = ok_json(cli("setup", "--name", "bob", "--yes", "--json"))
    assert second["name"] == "bob"
    assert second["address"] == first["address"]
    assert second["walletCreated"] is False
    assert "SOUL.md" in second["written"]  # renamed; the agent's own text is kept
    from automaton_min.store.db import open_database

    with open_database(home.root / "state.db") as db:  # the history: setup's first soul, then the renamed one
        rows = db.query("SELECT version, change_source, content FROM soul_history ORDER BY version")
    assert [(v, s) for v, s, _ in rows] == [(1, "genesis"), (2, "human")] and rows[1][2].startswith("# bob")

    after = read_json(home.config_path)
    assert after["name"] == "bob"
    for key, value in FULL_SETUP_VALUES.items():
        if key != "name":
            assert after[key] == value, key
    assert after["modelStrategy"]["inferenceModel"] == "qwen2.5-7b-instruct"
    assert after["myOwnNote"] == {"keep": ["me", 1]}
    assert after["treasuryPolicy"]["myOwnLimitCents"] == 42
    assert after["treasuryPolicy"]["maxSingleTransferCents"] == 5000
    assert after["maxTurnsPerCycle"] == 7
    assert after["walletAddress"] == first["address"]
    assert home.soul_path.read_text() == "# bob\n\nI rewrote my own soul.\n"
    assert mode_of(home.config_path) == 0o600
    assert mode_of(home.constitution_path) == 0o444

    status = ok_json(cli("status", "--json"))
    assert status["name"] == "bob"


def test_setup_rerun_inference_model_keeps_other_model_strategy_keys(cli, set_up):
    config = read_json(set_up.config_path)
    config["modelStrategy"]["lowComputeModel"] = "tiny-model"
    config["modelStrategy"]["myOwnKnob"] = True
    write_json(set_up.config_path, config)
    assert cli("setup", "--inference-model", "big-model", "--yes").code == 0
    after = read_json(set_up.config_path)
    assert after["inferenceModel"] == "big-model"
    assert after["modelStrategy"]["inferenceModel"] == "big-model"
    assert after["modelStrategy"]["lowComputeModel"] == "tiny-model"
    assert after["modelStrategy"]["myOwnKnob"] is True
    assert ok_json(cli("status", "--json"))["model"] == "big-model"


def test_setup_bad_value_changes_nothing_in_an_existing_home(cli, set_up):
    before = set_up.config_path.read_bytes()
    result = cli("setup", "--creator-address", "0x12", "--yes")
    assert_one_error_line(result, EXIT_USAGE, "creatorAddress", "0x-prefixed 40-hex-digit")
    assert set_up.config_path.read_bytes() == before


# --------------------------------------------------------------------------- setup, interactive


def interview(*, name="ada", genesis="Earn your keep.", creator=CREATOR, message="", sandbox="", model="",
              base_url="", openai_key="", anthropic_key="", conway_key="", local_only="") -> str:
    """The eleven answers of the wizard, in the order it asks them (the model after its server and key; local
    only last)."""
    answers = [name, genesis, creator, message, sandbox, base_url, openai_key, model, anthropic_key, conway_key,
               local_only]
    return "\n".join(answers) + "\n"


def test_interactive_setup_writes_the_config(home):
    answers = interview(message="Hello from your creator.", sandbox="sbx-42", model="llama-3.2-3b",
                        base_url="http://localhost:11434/v1\nkeep", openai_key=OPENAI_KEY)  # kept, not answering
    result = run_detached("setup", input=answers)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "ada is set up in" in result.stdout

    config = read_json(home.config_path)
    assert config["name"] == "ada"
    assert config["genesisPrompt"] == "Earn your keep."
    assert config["creatorAddress"] == CREATOR
    assert config["creatorMessage"] == "Hello from your creator."
    assert config["sandboxId"] == "sbx-42"
    assert config["inferenceModel"] == "llama-3.2-3b"
    assert config["modelStrategy"]["inferenceModel"] == "llama-3.2-3b"
    assert config["openaiBaseUrl"] == "http://localhost:11434/v1"
    assert config["openaiApiKey"] == OPENAI_KEY
    # Empty answers skip the optional keys.
    assert "anthropicApiKey" not in config
    assert "conwayApiKey" not in config
    assert config["registeredWithConway"] is False
    assert mode_of(home.config_path) == 0o600
    assert home.soul_path.is_file() and home.constitution_path.is_file() and home.wallet_path.is_file()
    # The key is never shown back.
    assert OPENAI_KEY not in result.stdout + result.stderr


def run_in_terminal(args: tuple[str, ...], answers: list[tuple[str, str]], timeout: float = 60) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal, typing each answer once its prompt has appeared. The terminal echoes what
    is typed unless the program turned echo off, so the transcript shows what a person at the keyboard would see."""
    return on_terminal([sys.executable, "-m", "automaton_min", *args], answers=answers, timeout_s=timeout)


def test_interactive_api_keys_are_not_echoed_on_a_terminal(home):
    visible_message = "hello-visible-message"
    anthropic = "sk-ant-hidden-0123456789ABCD"
    code, transcript = run_in_terminal(("setup",), [
        ("Name", "ada"),
        ("Genesis prompt", "Earn your keep."),
        ("Creator address", CREATOR),
        ("Message for its first run", visible_message),
        ("Conway sandbox id", ""),
        ("OpenAI-compatible base URL", ""),
        ("OpenAI API key", OPENAI_KEY),
        ("Inference model", ""),
        ("Anthropic API key", anthropic),
        ("Conway API key", ""),
        ("Local only?", ""),
    ])
    assert code == 0, transcript
    assert "Traceback" not in transcript
    assert "ada is set up in" in transcript
    assert visible_message in transcript, "ordinary answers are echoed (sanity check of the transcript)"
    for secret in (OPENAI_KEY, anthropic):
        assert secret not in transcript
        assert secret[-12:] not in transcript
    config = read_json(home.config_path)
    assert config["openaiApiKey"] == OPENAI_KEY
    assert config["anthropicApiKey"] == anthropic
    assert config["creatorMessage"] == visible_message
    assert "conwayApiKey" not in config  # an empty answer skips it


def test_interactive_bad_creator_address_asks_again(home):
    answers = "\n".join(["ada", "Earn your keep.", "0x12"]) + "\n" + interview()[len("ada\nEarn your keep.\n"):]
    result = run_detached("setup", input=answers)
    assert result.code == 0, result.stderr
    shown = result.stdout + result.stderr
    assert "expected a 0x-prefixed 40-hex-digit address (got '0x12'); type it again" in shown
    assert "--" not in shown  # the wizard names no flag
    assert shown.count("Creator address") == 2
    assert read_json(home.config_path)["creatorAddress"] == CREATOR


def test_wizard_says_what_it_creates_and_why_it_asks_again_and_shows_no_log_lines(home):
    with socket.socket() as probe:  # a loopback port nothing listens on: the model step finds no server
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    code, transcript = run_in_terminal(("setup",), [
        ("Name", "ada"),
        ("Genesis prompt", "Earn your keep."),
        ("Creator address", ""),
        ("Make a creator wallet for you now?", "n"),
        ("Creator address", ""),
        ("Creator address", "0x12"),
        ("Creator address", CREATOR),
        ("Message for its first run", ""),
        ("Conway sandbox id", ""),
        ("OpenAI-compatible base URL", f"http://127.0.0.1:{closed}/v1"),
        ("press Enter to try again", "-"),
        ("OpenAI API key", ""),
        ("Inference model", "gemma-3-270m"),
        ("Anthropic API key", ""),
        ("Conway API key", ""),
        ("Local only?", ""),
    ])
    assert code == 0, transcript
    lines = transcript.splitlines()
    assert lines[0] == (f"This creates an automaton in {home.root}: automaton.json, SOUL.md, constitution.md and "
                        "state.db; it creates its wallet (wallet.json).")
    blank = max(i for i, line in enumerate(lines) if line == "Creator address (0x...): ")
    assert lines[blank + 1] == ("Error: the creator address is required; type your own wallet's 0x address "
                                "(you own the agent)")
    assert "(got '0x12'); type it again" in lines[blank + 3]
    assert f"http://127.0.0.1:{closed}/v1 does not answer" in transcript
    assert "openaiBaseUrl" not in read_json(home.config_path)  # none, as answered: nothing was guessed
    assert "--" not in transcript  # no flag is named inside the wizard
    # The wallet and the migrations are logged at info: not on the terminal during the wizard.
    assert "automaton_min." not in transcript and "applied migration" not in transcript
    assert lines[-1].startswith("Next, with gemma-3-270m through Conway")  # no server, as answered
    assert home.wallet_path.is_file()


def test_a_blank_creator_address_makes_the_owner_a_creator_wallet_and_says_where_its_key_goes(home, tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "owner"))
    code, transcript = run_in_terminal(("setup",), [
        ("Name", "ada"), ("Genesis prompt", "Earn your keep."), ("Creator address", ""),
        ("Make a creator wallet for you now?", "y"), ("Message for its first run", ""), ("Conway sandbox id", ""),
        ("OpenAI-compatible base URL", ""), ("OpenAI API key", ""), ("Inference model", ""),
        ("Anthropic API key", ""), ("Conway API key", ""), ("Local only?", ""),
    ])
    assert code == 0, transcript
    creator = json.loads((tmp_path / "owner" / "creator" / "wallet.json").read_text())
    from eth_account import Account

    address = Account.from_key(creator["privateKey"]).address
    assert read_json(home.config_path)["creatorAddress"].lower() == address.lower()
    assert f"Its key goes to {tmp_path / 'owner' / 'creator' / 'wallet.json'}" in transcript.replace("\n", " ")
    assert "it is yours, not the agent's" in transcript and creator["privateKey"][2:] not in transcript
    assert mode_of(tmp_path / "owner" / "creator" / "wallet.json") == 0o600


def test_wizard_on_a_set_up_home_says_it_changes_it(set_up):
    result = run_detached("setup", input="\n" * 11)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith(f"This changes the automaton in {set_up.root}: ")
    assert "it keeps its wallet" in result.stdout.splitlines()[0]


def test_interactive_does_not_ask_for_values_given_as_flags(home):
    answers = interview()[len("ada\n"):]  # no answer for the name: it comes from the flag
    result = run_detached("setup", "--name", "flagged", input=answers)
    assert result.code == 0, result.stderr
    assert "Name" not in result.stdout.split("Genesis prompt")[0]
    config = read_json(home.config_path)
    assert config["name"] == "flagged"
    assert config["genesisPrompt"] == "Earn your keep."
    assert config["creatorAddress"] == CREATOR


def test_interactive_rerun_offers_current_values(set_up):
    """A second interactive run where every answer is empty keeps every value."""
    before = read_json(set_up.config_path)
    result = run_detached("setup", input="\n" * 11)
    assert result.code == 0, result.stderr
    after = read_json(set_up.config_path)
    for key in ("name", "genesisPrompt", "creatorAddress", "walletAddress", "inferenceModel"):
        assert after[key] == before[key], key


def test_interactive_eof_is_one_line_and_writes_nothing(home):
    result = run_detached("setup", input="ada\nEarn your keep.\n")
    assert_one_error_line(result, EXIT_USAGE, "setup", "--yes")
    assert not home.config_path.exists()
    assert not home.wallet_path.exists()


# --------------------------------------------------------------------------- config show


def test_config_show_prints_effective_config(cli, set_up):
    data = ok_json(cli("config", "show"))
    assert data["name"] == "ada"
    assert data["creatorAddress"] == CREATOR
    assert data["walletAddress"] == read_json(set_up.config_path)["walletAddress"]
    # defaults are merged in
    assert data["maxTurnsPerCycle"] == 25
    assert data["treasuryPolicy"]["x402AllowedDomains"] == ["conway.tech"]
    assert data["modelStrategy"]["inferenceModel"] == "gpt-5.2"


def test_config_show_masks_secrets(cli, set_up):
    anthropic = "sk-ant-abcdefghijklmnop1234"
    assert cli("setup", "--openai-api-key", "-", "--anthropic-api-key", "-", "--yes",
               input=f"{OPENAI_KEY}\n{anthropic}\n").code == 0
    result = cli("config", "show")
    data = ok_json(result)
    assert data["openaiApiKey"] == "****WXYZ"
    assert data["anthropicApiKey"] == "****1234"
    for secret in (OPENAI_KEY, anthropic, OPENAI_KEY[:-4], anthropic[:-4]):
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("secret", "shown"),
    [("0123456789abcdef", "****cdef"), ("0123456789abcde", "****"), ("abc", "****")],
    ids=["16-chars-shows-last-4", "15-chars-fully-masked", "short"],
)
def test_config_show_mask_threshold(cli, set_up, secret, shown):
    edit_config(set_up, openaiApiKey=secret)
    result = cli("config", "show")
    assert ok_json(result)["openaiApiKey"] == shown
    assert secret not in result.stdout


def test_env_conway_api_key_overrides_and_is_not_saved(cli, set_up):
    edit_config(set_up, conwayApiKey="cwk-from-file-000000000000AAAA")
    before = set_up.config_path.read_bytes()
    result = cli("config", "show", env={"CONWAY_API_KEY": CONWAY_KEY})
    assert ok_json(result)["conwayApiKey"] == "****QRST"
    assert CONWAY_KEY not in result.stdout + result.stderr
    assert set_up.config_path.read_bytes() == before

    # Neither does status nor a setup run persist the environment's key.
    assert cli("status", env={"CONWAY_API_KEY": CONWAY_KEY}).code == 0
    assert cli("setup", "--name", "bob", "--yes", env={"CONWAY_API_KEY": CONWAY_KEY}).code == 0
    saved = read_json(set_up.config_path)
    assert saved["conwayApiKey"] == "cwk-from-file-000000000000AAAA"
    assert CONWAY_KEY not in set_up.config_path.read_text()

    # Without the variable, the file's key is back.
    assert ok_json(cli("config", "show"))["conwayApiKey"] == "****AAAA"


def test_env_conway_api_key_without_one_in_the_file(cli, set_up):
    assert "conwayApiKey" not in read_json(set_up.config_path)
    assert ok_json(cli("config", "show", env={"CONWAY_API_KEY": CONWAY_KEY}))["conwayApiKey"] == "****QRST"
    assert "conwayApiKey" not in read_json(set_up.config_path)


def test_provisioned_api_key_is_used_when_config_has_none(cli, set_up):
    provisioned = "cwk-provisioned-00000000ZZZZ"
    set_up.api_key_path.write_text(json.dumps({"apiKey": provisioned}))
    os.chmod(set_up.api_key_path, 0o600)
    result = cli("config", "show")
    assert ok_json(result)["conwayApiKey"] == "****ZZZZ"
    assert provisioned not in result.stdout
    assert "conwayApiKey" not in read_json(set_up.config_path)

    # The config's own key wins over the provisioned one ...
    edit_config(set_up, conwayApiKey="cwk-configured-0000000YYYY")
    assert ok_json(cli("config", "show"))["conwayApiKey"] == "****YYYY"
    # ... and the environment wins over both.
    assert ok_json(cli("config", "show", env={"CONWAY_API_KEY": CONWAY_KEY}))["conwayApiKey"] == "****QRST"


# --------------------------------------------------------------------------- status


def test_status_after_setup(cli, home):
    address = ok_json(cli("init"))["address"]
    assert cli("setup", "--name", "ada", "--genesis-prompt", "Earn your keep.", "--creator-address", CREATOR, "--yes").code == 0

    data = ok_json(cli("status", "--json"))
    assert data["name"] == "ada"
    assert data["address"] == address
    assert data["creator"] == CREATOR
    assert data["state"] == "setup"
    assert data["turns"] == 0
    assert data["lastTurnAt"] is None
    assert data["sandbox"] is None
    assert data["model"] == "gpt-5.2"
    assert data["version"] == "0.1.0"
    assert data["home"] == str(home.root)

    text = cli("status")
    assert text.code == 0, text.stderr
    assert text.stdout.startswith("ada  (automaton-min 0.1.0)")
    rows = {line.split()[0]: line.split(None, 1)[1].strip() for line in text.stdout.splitlines()[1:] if line.strip()}
    assert rows["address"] == address
    assert rows["creator"] == CREATOR
    assert rows["state"] == "setup"
    assert rows["turns"] == "0"
    assert rows["sandbox"] == "local"
    assert any(line.split() == ["last", "turn", "-"] for line in text.stdout.splitlines())


def test_status_reports_turns_and_state_from_the_database(cli, set_up):
    timestamps = add_turns(set_up, 3, state="sleeping")
    data = ok_json(cli("status", "--json"))
    assert data["turns"] == 3
    assert data["lastTurnAt"] == max(timestamps)
    assert data["state"] == "sleeping"

    text = cli("status")
    assert text.code == 0
    assert "sleeping" in text.stdout
    assert max(timestamps) in text.stdout
    assert any(line.split() == ["turns", "3"] for line in text.stdout.splitlines())


def test_status_treats_an_unknown_state_as_setup(cli, set_up):
    add_turns(set_up, 1, state="confused")
    assert ok_json(cli("status", "--json"))["state"] == "setup"


def test_status_does_not_show_secrets(cli, set_up):
    assert cli("setup", "--openai-api-key", "-", "--yes", input=OPENAI_KEY).code == 0
    for args in (("status",), ("status", "--json")):
        result = cli(*args, env={"CONWAY_API_KEY": CONWAY_KEY})
        assert result.code == 0
        assert OPENAI_KEY not in result.stdout + result.stderr
        assert CONWAY_KEY not in result.stdout + result.stderr


# --------------------------------------------------------------------------- logging level


def test_config_log_level_quiets_status(cli, set_up):
    edit_config(set_up, logLevel="error")
    quiet = cli("status")
    assert quiet.code == 0
    assert quiet.stderr_lines == []

    edit_config(set_up, logLevel="debug")  # status logs opening the database at debug
    loud = cli("status")
    assert loud.code == 0
    assert any("opened database" in line for line in loud.stderr_lines)


def test_log_level_flag(cli, home, set_up):
    edit_config(set_up, logLevel="debug")  # status would log opening the database
    quiet = cli("--log-level", "error", "status")  # the flag beats the config's logLevel
    assert quiet.code == 0, quiet.stderr
    assert quiet.stderr_lines == []

    other = home.root.parent / "second"
    assert cli("--home", str(other), "--log-level", "error", "init").stderr_lines == []
    third = home.root.parent / "third"
    assert cli("--home", str(third), "init").stderr_lines == []  # init says what it made on stdout
    fourth = home.root.parent / "fourth"
    loud = cli("--home", str(fourth), "--log-level", "info", "init")
    assert any("created a new wallet" in line for line in loud.stderr_lines)


# --------------------------------------------------------------------------- doctor


def test_doctor_passes_on_a_set_up_home(cli, set_up):
    text = cli("doctor")
    assert text.code == 0, text.stdout
    assert text.stdout.rstrip().endswith("all checks passed")
    assert "FAIL" not in text.stdout

    report = ok_json(cli("doctor", "--json"))
    assert set(report) == {"ok", "checks"}
    assert report["ok"] is True
    assert report["checks"], "doctor must report its checks"
    for check in report["checks"]:
        assert set(check) == {"name", "ok", "detail", "fix", "state"}
        assert isinstance(check["name"], str) and isinstance(check["detail"], str) and isinstance(check["fix"], str)
        assert check["state"] in ({"ok", "off", "skip"} if check["ok"] else {"fail"})
        assert check["ok"] is True
    names = {check["name"] for check in report["checks"]}
    assert {"home", "config", "wallet", "constitution", "soul", "database integrity"} <= names


def test_doctor_still_passes_after_turns(cli, set_up):
    add_turns(set_up, 50, state="running", thinking_size=300)
    assert cli("doctor").code == 0


def _doctor_failure(cli, check_name: str) -> dict[str, Any]:
    """Run doctor (text and JSON); both exit 1; return the failing check named ``check_name``."""
    text = cli("doctor")
    assert text.code == EXIT_FAILURE, text.stdout + text.stderr
    assert "Traceback" not in text.stderr
    assert "failed: " in text.stdout and check_name in text.stdout.splitlines()[-1]
    assert "FAIL" in text.stdout

    result = cli("doctor", "--json")
    assert result.code == EXIT_FAILURE
    report = json.loads(result.stdout)
    assert report["ok"] is False
    failing = failing_checks(report)
    assert check_name in failing, report
    check = failing[check_name]
    assert check["fix"], check
    assert f"fix: {check['fix']}" in text.stdout
    return check


def test_doctor_open_wallet(cli, set_up):
    os.chmod(set_up.wallet_path, 0o644)
    check = _doctor_failure(cli, "wallet")
    assert "chmod 600" in check["fix"]
    assert str(set_up.wallet_path) in check["fix"]
    assert "0644" in check["detail"]


def test_doctor_writable_constitution(cli, set_up):
    os.chmod(set_up.constitution_path, 0o644)
    check = _doctor_failure(cli, "constitution")
    assert "chmod 444" in check["fix"]
    assert str(set_up.constitution_path) in check["fix"]


def test_doctor_invalid_config_value(cli, set_up):
    edit_config(set_up, maxTurnsPerCycle=0)
    check = _doctor_failure(cli, "config")
    assert "maxTurnsPerCycle" in check["detail"]
    assert str(set_up.config_path) in check["fix"] or "automaton-min setup" in check["fix"]


def test_doctor_config_not_json(cli, set_up):
    set_up.config_path.write_text("{ not json")
    check = _doctor_failure(cli, "config")
    assert "not valid JSON" in check["detail"]


def test_doctor_damaged_database(cli, set_up):
    add_turns(set_up, 200, thinking_size=500)  # ~200 KiB, so the middle of the file is turn data
    overwrite_middle(set_up.default_db_path)
    text = cli("doctor")
    assert text.code == EXIT_FAILURE
    report = json.loads(cli("doctor", "--json").stdout)
    failing = failing_checks(report)
    db_failures = {name: check for name, check in failing.items() if name.startswith("database")}
    assert db_failures, report
    for check in db_failures.values():
        assert "state.db" in check["fix"]
    assert "Traceback" not in text.stderr


def test_doctor_garbage_database(cli, set_up):
    garbage_db(set_up)
    check = _doctor_failure(cli, "database")
    assert "state.db" in check["fix"]
    assert "cannot be opened" in check["detail"]


def test_doctor_index_out_of_step_with_table(cli, set_up):
    """Damage only a full integrity check finds: the two turns indexes swap root pages."""
    add_turns(set_up, 20)
    connection = apsw.Connection(str(set_up.default_db_path))
    roots = dict(connection.execute(
        "SELECT name, rootpage FROM sqlite_master WHERE name IN ('idx_turns_timestamp', 'idx_turns_state')"))
    connection.execute("PRAGMA writable_schema=ON")
    connection.execute("UPDATE sqlite_master SET rootpage=? WHERE name='idx_turns_timestamp'", (roots["idx_turns_state"],))
    connection.execute("UPDATE sqlite_master SET rootpage=? WHERE name='idx_turns_state'", (roots["idx_turns_timestamp"],))
    connection.execute("PRAGMA writable_schema=OFF")
    connection.close()
    check = _doctor_failure(cli, "database integrity")
    assert "restore" in check["fix"] and "state.db" in check["fix"]


def test_doctor_on_a_missing_home(cli, home):
    report_result = cli("doctor", "--json")
    assert report_result.code == EXIT_FAILURE
    report = json.loads(report_result.stdout)
    assert report["ok"] is False
    assert failing_checks(report)["home"]["fix"] == "run: automaton-min setup"
    assert not home.root.exists(), "doctor only looks; it must not create the home"


def test_doctor_reports_an_unreadable_config_as_a_check(cli, set_up):
    set_up.config_path.unlink()
    set_up.config_path.mkdir()
    result = cli("doctor", "--json")
    assert result.code == EXIT_FAILURE
    report = json.loads(result.stdout)
    assert "config" in failing_checks(report)


def test_doctor_home_is_a_regular_file(cli, tmp_path):
    target = tmp_path / "a-file"
    target.write_text("hello")
    report = json.loads(cli("--home", str(target), "doctor", "--json").stdout)
    check = failing_checks(report)["home"]
    assert "not a directory" in check["detail"]
    assert "--home" in check["fix"]


# --------------------------------------------------------------------------- one line per mistake


def _setup(cli) -> None:
    result = cli("setup", "--name", "ada", "--genesis-prompt", "Earn your keep.", "--creator-address", CREATOR, "--yes")
    assert result.code == 0, result.stderr


def _bad_config(**changes: Any) -> Callable[[Any, Home, Path], None]:
    def prepare(cli, home: Home, tmp_path: Path) -> None:
        _setup(cli)
        edit_config(home, **changes)
    return prepare


def _not_json(cli, home: Home, tmp_path: Path) -> None:
    _setup(cli)
    home.config_path.write_text('{"name": "ada",')


def _open_wallet(cli, home: Home, tmp_path: Path) -> None:
    assert cli("init").code == 0
    os.chmod(home.wallet_path, 0o644)


def _solana_wallet(cli, home: Home, tmp_path: Path) -> None:
    home.root.mkdir(mode=0o700)
    home.wallet_path.write_text(json.dumps({"chainType": "solana", "secretKey": [1, 2, 3], "createdAt": "2026-01-01T00:00:00.000Z"}))
    os.chmod(home.wallet_path, 0o600)


def _garbage_state_db(cli, home: Home, tmp_path: Path) -> None:
    _setup(cli)
    garbage_db(home)


def _damaged_turns(cli, home: Home, tmp_path: Path) -> None:
    _setup(cli)
    add_turns(home, 200, thinking_size=500)
    corrupt_table(home, "turns")


def _init_only(cli, home: Home, tmp_path: Path) -> None:
    assert cli("init").code == 0


def _home_is_file(cli, home: Home, tmp_path: Path) -> None:
    home.root.write_text("I am a file, not a directory\n")


def _nothing(cli, home: Home, tmp_path: Path) -> None:
    pass


SETUP_FLAGS = ("--genesis-prompt", "Earn.", "--creator-address", CREATOR)

# (id, prepare, args, exit code, substrings the one line must contain)
MISTAKES = [
    ("status-before-setup", _nothing, ("status",), 2, ("automaton-min setup",)),
    ("status-after-init-only", _init_only, ("status", "--json"), 2, ("no automaton is set up", "automaton-min setup")),
    ("config-show-before-setup", _nothing, ("config", "show"), 2, ("automaton-min setup",)),
    ("config-not-json", _not_json, ("status",), 2, ("automaton.json", "not valid JSON", "automaton-min setup")),
    ("config-not-json-config-show", _not_json, ("config", "show"), 2, ("automaton.json", "not valid JSON")),
    ("config-not-json-setup", _not_json, ("setup", "--yes"), 2, ("automaton.json", "not valid JSON", "move it aside")),
    ("creator-address-invalid", _bad_config(creatorAddress="0x1234"), ("status",), 2,
     ("automaton.json", "creatorAddress: expected a 0x-prefixed 40-hex-digit address")),
    ("creator-address-trailing-newline", _bad_config(creatorAddress=CREATOR + "\n"), ("status",), 2,
     ("automaton.json", "creatorAddress: expected a 0x-prefixed 40-hex-digit address")),
    ("max-turns-zero", _bad_config(maxTurnsPerCycle=0), ("status",), 2,
     ("automaton.json", "maxTurnsPerCycle", "from 1 to 10000")),
    ("log-level-loud", _bad_config(logLevel="loud"), ("config", "show"), 2,
     ("automaton.json", "logLevel", "expected one of", "debug")),
    ("treasury-not-object", _bad_config(treasuryPolicy=5), ("status",), 2, ("treasuryPolicy", "expected an object")),
    ("nested-value-invalid", _bad_config(treasuryPolicy={"maxSingleTransferCents": -1}), ("status",), 2,
     ("treasuryPolicy.maxSingleTransferCents", "whole number")),
    ("chain-type-solana-in-config", _bad_config(chainType="solana"), ("status",), 2, ("chainType", "solana", "evm")),
    ("setup-yes-missing-name", _nothing, ("setup", *SETUP_FLAGS, "--yes"), 2, ("--name",)),
    ("setup-yes-missing-all", _nothing, ("setup", "--yes"), 2, ("--name", "--genesis-prompt", "--creator-address")),
    ("setup-bad-creator", _nothing, ("setup", "--name", "ada", "--genesis-prompt", "g", "--creator-address", "0x12", "--yes"), 2,
     ("creatorAddress", "0x-prefixed 40-hex-digit")),
    ("setup-bad-url", _nothing, ("setup", "--name", "ada", *SETUP_FLAGS, "--openai-base-url", "localhost:8080", "--yes"), 2,
     ("openaiBaseUrl", "http:// or https://")),
    ("home-is-file-init", _home_is_file, ("init",), 2, ("not a directory", "--home")),
    ("home-is-file-setup", _home_is_file, ("setup", "--name", "ada", *SETUP_FLAGS, "--yes"), 2, ("not a directory", "--home")),
    ("wallet-open-init", _open_wallet, ("init",), 2, ("wallet.json", "0644", "chmod 600")),
    ("wallet-open-setup", _open_wallet, ("setup", "--name", "ada", *SETUP_FLAGS, "--yes"), 2, ("chmod 600",)),
    ("wallet-solana", _solana_wallet, ("init",), 2, ("Solana", "EVM")),
    ("state-db-garbage", _garbage_state_db, ("status",), 1, ("state.db", "automaton-min doctor")),
    ("state-db-garbage-json", _garbage_state_db, ("status", "--json"), 1, ("state.db", "automaton-min doctor")),
    ("state-db-damaged-turns", _damaged_turns, ("status",), 1, ("database", "malformed", "automaton-min doctor")),
]

WRITES_NOTHING = {"setup-yes-missing-name", "setup-yes-missing-all", "setup-bad-creator", "setup-bad-url"}


@pytest.mark.parametrize(("prepare", "args", "code", "needles"),
                         [pytest.param(*case[1:], id=case[0]) for case in MISTAKES])
def test_one_line_per_mistake(request, cli, home, tmp_path, prepare, args, code, needles):
    prepare(cli, home, tmp_path)
    result = cli(*args)
    assert_one_error_line(result, code, *needles)
    assert result.stdout == ""
    if request.node.callspec.id in WRITES_NOTHING:
        assert not home.config_path.exists()
        assert not home.wallet_path.exists()
        assert not home.root.exists()


def test_env_override_with_a_bad_value(cli, set_up):
    result = cli("status", env={"SOCIAL_RELAY_URL": "not-a-url"})
    assert_one_error_line(result, EXIT_USAGE, "socialRelayUrl", "http:// or https://")


def test_env_override_error_names_the_variable(cli, set_up):
    result = cli("status", env={"SOCIAL_RELAY_URL": "not-a-url"})
    assert_one_error_line(result, EXIT_USAGE, "SOCIAL_RELAY_URL")


def test_solana_wallet_error_names_a_fix(cli, home):
    _solana_wallet(cli, home, home.root.parent)
    line = assert_one_error_line(cli("init"), EXIT_USAGE, "Solana")
    assert any(hint in line for hint in ("--home", "move", "automaton-min init")), line


@pytest.mark.parametrize("args", [("status",), ("config", "show")], ids=["status", "config-show"])
def test_home_is_a_file_for_read_commands(cli, home, args):
    home.root.write_text("I am a file\n")
    assert_one_error_line(cli(*args), EXIT_USAGE, "not a directory", "--home")


@pytest.mark.parametrize(
    "args",
    [("--bogus",), ("status", "--bogus"), ("setup", "--nmae", "ada"), ("nosuchcommand",), ("--log-level", "loud", "status"),
     ("setup", "--genesis-prompt-file", "/nonexistent/genesis.txt", "--yes")],
    ids=["unknown-global-option", "unknown-status-option", "misspelt-setup-flag", "unknown-command", "bad-log-level-flag",
         "missing-genesis-file"],
)
def test_usage_errors(cli, home, args):
    result = cli(*args)
    assert result.code == EXIT_USAGE
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    error_lines = [line for line in result.stderr_lines if line.startswith("Error:")]
    assert len(error_lines) == 1, result.stderr
    assert "Usage: automaton-min" in result.stderr
    assert not home.root.exists()


def test_setup_json_flag_error_is_not_json(cli, home):
    """A failing ``--json`` command still reports on stderr and prints nothing half-formed on stdout."""
    result = cli("setup", "--name", "ada", "--yes", "--json")
    assert_one_error_line(result, EXIT_USAGE, "--genesis-prompt", "--creator-address")
    assert result.stdout == ""


# --------------------------------------------------------------------------- exit-code contract


def test_exit_code_constants():
    assert (EXIT_OK, EXIT_FAILURE, EXIT_USAGE) == (0, 1, 2)


def test_exit_code_contract(cli, set_up):
    assert cli("status").code == 0
    assert cli("doctor").code == 0
    assert cli("config", "show").code == 0
    assert cli("status", "--no-such-flag").code == 2  # usage
    edit_config(set_up, maxTurnsPerCycle=0)
    assert cli("status").code == 2  # configuration
    assert cli("doctor").code == 1  # a failing health check is a run-time failure
    edit_config(set_up, maxTurnsPerCycle=25)
    garbage_db(set_up)
    assert cli("status").code == 1  # run-time failure (the database)
    assert cli("doctor").code == 1
