"""automaton.json: defaults, deep merge, unknown keys, validation messages, env overrides, redaction, paths."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from automaton_min.config import (
    DEFAULT_MODEL_STRATEGY,
    DEFAULT_TREASURY_POLICY,
    DEFAULTS,
    Config,
    config_from,
    db_path,
    load_config,
    redact_secret,
    save_config,
)
from automaton_min.errors import ConfigError
from automaton_min.home import Home

from conftest import CREATOR

MINIMAL = {"name": "ada", "genesisPrompt": "Earn your keep.", "creatorAddress": CREATOR}


def write_config(home: Home, data: dict) -> None:
    home.ensure()
    home.config_path.write_bytes(orjson.dumps(data))


def test_missing_file_says_to_run_setup(home: Home) -> None:
    with pytest.raises(ConfigError, match="run: automaton-min setup"):
        load_config(home)


def test_defaults_fill_every_key_the_file_leaves_out(home: Home) -> None:
    write_config(home, MINIMAL)
    config = load_config(home)
    for key, value in DEFAULTS.items():
        assert config[key] == value, key
    assert config["name"] == "ada"
    assert config["treasuryPolicy"] == DEFAULT_TREASURY_POLICY


def test_nested_sections_merge_key_by_key(home: Home) -> None:
    write_config(home, {**MINIMAL, "treasuryPolicy": {"maxSingleTransferCents": 100}, "modelStrategy": {"lowComputeModel": "tiny"}})
    config = load_config(home)
    assert config["treasuryPolicy"] == {**DEFAULT_TREASURY_POLICY, "maxSingleTransferCents": 100}
    assert config["modelStrategy"] == {**DEFAULT_MODEL_STRATEGY, "lowComputeModel": "tiny"}


def test_null_values_read_as_unset(home: Home) -> None:
    write_config(home, {**MINIMAL, "inferenceModel": None, "sandboxId": None})
    config = load_config(home)
    assert config["inferenceModel"] == DEFAULTS["inferenceModel"]
    assert config.get("sandboxId", "local") == "local"


def test_unknown_keys_survive_a_load_save_round_trip(home: Home) -> None:
    write_config(home, {**MINIMAL, "futureFeature": {"depth": [1, 2]}, "treasuryPolicy": {"futureLimitCents": 7}})
    save_config(home, load_config(home))
    saved = orjson.loads(home.config_path.read_bytes())
    assert saved["futureFeature"] == {"depth": [1, 2]}
    assert saved["treasuryPolicy"]["futureLimitCents"] == 7
    assert saved["treasuryPolicy"]["maxDailyTransferCents"] == DEFAULT_TREASURY_POLICY["maxDailyTransferCents"]


def test_saved_file_is_private_and_loads_back_equal(home: Home) -> None:
    home.ensure()
    config = config_from({**MINIMAL, "openaiApiKey": "sk-test-0123456789abcdef"})
    save_config(home, config)
    assert home.config_path.stat().st_mode & 0o777 == 0o600
    assert load_config(home).stored == config.stored


def test_a_reference_runtime_config_loads(home: Home) -> None:
    reference = {
        "name": "old-agent", "genesisPrompt": "Survive.", "creatorAddress": CREATOR,
        "walletAddress": "0x" + "ab" * 20, "sandboxId": "", "registeredWithConway": True,
        "conwayApiUrl": "https://api.conway.tech", "conwayApiKey": "cnwy_k_abcdefghijklmnop",
        "inferenceModel": "gpt-5.2", "maxTokensPerTurn": 4096, "heartbeatConfigPath": "~/.automaton/heartbeat.yml",
        "dbPath": "~/.automaton/state.db", "logLevel": "info", "version": "0.2.1", "skillsDir": "~/.automaton/skills",
        "maxChildren": 3, "maxTurnsPerCycle": 25, "childSandboxMemoryMb": 1024,
        "socialRelayUrl": "https://social.conway.tech", "chainType": "evm",
        "treasuryPolicy": DEFAULT_TREASURY_POLICY, "modelStrategy": DEFAULT_MODEL_STRATEGY,
        "soulConfig": {"soulAlignmentThreshold": 0.5, "requireCreatorApprovalForPurposeChange": False, "enableSoulReflection": True},
    }
    write_config(home, reference)
    config = load_config(home)
    assert config["version"] == "0.2.1"
    assert db_path(home, config) == home.root / "state.db"


BAD_VALUES = [
    ("creatorAddress", "0x1234", "creatorAddress: expected a 0x-prefixed 40-hex-digit address"),
    ("creatorAddress", "0x1234567890AbcdEF1234567890aBcdef12345678\n", "creatorAddress: expected a 0x-prefixed 40-hex-digit address"),
    ("walletAddress", "not-an-address", "walletAddress: expected a 0x-prefixed 40-hex-digit address"),
    ("name", "", "name: expected a non-empty string"),
    ("name", "x" * 65, "name: expected at most 64 characters"),
    ("name", 42, "name: expected a string"),
    ("conwayApiUrl", "ftp://conway", "conwayApiUrl: expected an http:// or https:// URL"),
    ("openaiBaseUrl", "http://127.0.0.1:8080/v1 extra", "openaiBaseUrl: expected an http:// or https:// URL"),
    ("openaiBaseUrl", "localhost:8080", "openaiBaseUrl: expected an http:// or https:// URL"),
    ("maxTokensPerTurn", 0, "maxTokensPerTurn: expected a whole number from 1 to 1000000"),
    ("maxTokensPerTurn", 12.5, "maxTokensPerTurn: expected a whole number"),
    ("maxTurnsPerCycle", True, "maxTurnsPerCycle: expected a whole number"),
    ("logLevel", "loud", "logLevel: expected one of debug, info"),
    ("chainType", "solana", "chainType: solana is not supported by automaton-min; only evm"),
    ("chainType", "bitcoin", "chainType: expected one of evm"),
    ("registeredWithConway", "yes", "registeredWithConway: expected true or false"),
    ("treasuryPolicy", 5, "treasuryPolicy: expected an object"),
    ("treasuryPolicy", {"maxSingleTransferCents": -1}, "treasuryPolicy.maxSingleTransferCents: expected a whole number from 0"),
    ("treasuryPolicy", {"x402AllowedDomains": ["conway.tech\n"]}, "treasuryPolicy.x402AllowedDomains: expected a list of domain names"),
    ("treasuryPolicy", {"x402AllowedDomains": ["https://conway.tech"]}, "treasuryPolicy.x402AllowedDomains: expected a list of domain names"),
    ("treasuryPolicy", {"knownPayees": ["0x12"]}, "treasuryPolicy.knownPayees: expected a list of at most 1000 0x addresses"),
    ("treasuryPolicy", {"knownPayees": "0x" + "ab" * 20}, "treasuryPolicy.knownPayees: expected a list"),
    ("modelStrategy", {"enableModelFallback": 1}, "modelStrategy.enableModelFallback: expected true or false"),
    ("soulConfig", {"soulAlignmentThreshold": 1.5}, "soulConfig.soulAlignmentThreshold: expected a number from 0 to 1"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_each_rule_names_the_key_and_the_rule(home: Home, key: str, value: object, message: str) -> None:
    write_config(home, {**MINIMAL, key: value})
    with pytest.raises(ConfigError) as caught:
        load_config(home)
    text = str(caught.value)
    assert message in text
    assert str(home.config_path) in text
    assert "\n" not in text


def test_secret_values_are_not_echoed_in_errors(home: Home) -> None:
    write_config(home, {**MINIMAL, "openaiApiKey": ["sk-live-supersecretvalue"]})
    with pytest.raises(ConfigError) as caught:
        load_config(home)
    assert "openaiApiKey: expected a string" in str(caught.value)
    assert "supersecret" not in str(caught.value)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b""])
def test_unreadable_documents_are_config_errors(home: Home, content: bytes) -> None:
    home.ensure()
    home.config_path.write_bytes(content)
    with pytest.raises(ConfigError, match=str(home.config_path)):
        load_config(home)


def test_environment_overrides_apply_but_are_not_saved(home: Home) -> None:
    write_config(home, MINIMAL)
    env = {"CONWAY_API_KEY": "env-key-0123456789abcdef", "OLLAMA_BASE_URL": "http://127.0.0.1:11434",
           "AUTOMATON_RPC_URL": "http://127.0.0.1:8545", "SOCIAL_RELAY_URL": "http://127.0.0.1:9000"}
    config = load_config(home, env)
    assert config["conwayApiKey"] == "env-key-0123456789abcdef"
    assert config["ollamaBaseUrl"] == "http://127.0.0.1:11434"
    assert config["rpcUrl"] == "http://127.0.0.1:8545"
    assert config["socialRelayUrl"] == "http://127.0.0.1:9000"
    save_config(home, config)
    saved = orjson.loads(home.config_path.read_bytes())
    assert "conwayApiKey" not in saved and "rpcUrl" not in saved
    assert saved["socialRelayUrl"] == DEFAULTS["socialRelayUrl"]


def test_a_bad_environment_override_is_named(home: Home) -> None:
    write_config(home, MINIMAL)
    with pytest.raises(ConfigError, match=r"environment variable OLLAMA_BASE_URL \(ollamaBaseUrl\): expected an http"):
        load_config(home, {"OLLAMA_BASE_URL": "11434"})


def test_provisioned_api_key_is_the_fallback_for_conway_api_key(home: Home) -> None:
    write_config(home, MINIMAL)
    home.api_key_path.write_bytes(orjson.dumps({"apiKey": "provisioned-key-123456", "walletAddress": "0x" + "11" * 20}))
    assert load_config(home, {})["conwayApiKey"] == "provisioned-key-123456"
    write_config(home, {**MINIMAL, "conwayApiKey": "file-key-abcdefghijkl"})
    assert load_config(home, {})["conwayApiKey"] == "file-key-abcdefghijkl"


def test_redaction_masks_every_secret() -> None:
    config = config_from({**MINIMAL, "openaiApiKey": "sk-abcdefghijklmnop1234", "anthropicApiKey": "short", "conwayApiKey": "cnwy-0123456789abcdefXYZW"})
    shown = config.redacted()
    assert shown["openaiApiKey"] == "****1234"
    assert shown["anthropicApiKey"] == "****"
    assert shown["conwayApiKey"] == "****XYZW"
    assert shown["name"] == "ada"
    assert redact_secret("x" * 40).startswith("****")


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("~/.automaton/state.db", "HOME/state.db"),
        ("~/.automaton/data/agent.db", "HOME/data/agent.db"),
        ("state2.db", "HOME/state2.db"),
        ("/srv/agent/state.db", "/srv/agent/state.db"),
    ],
)
def test_db_path_resolves_inside_the_home_in_use(home: Home, configured: str, expected: str) -> None:
    config = Config(stored={}, values={"dbPath": configured})
    assert db_path(home, config) == Path(expected.replace("HOME", str(home.root)))


def test_db_path_expands_other_user_paths(home: Home, tmp_path: Path) -> None:
    config = Config(stored={}, values={"dbPath": "~/elsewhere/state.db"})
    assert db_path(home, config) == tmp_path / "user" / "elsewhere" / "state.db"


def test_memory_budget_and_context_mode_are_checked() -> None:
    from automaton_min.config import validate

    validate({"memoryBudget": {"semantic": 500}, "contextMode": "compact"})
    for bad, named in (({"memoryBudget": {"semantic": -1}}, "memoryBudget.semantic"), ({"memoryBudget": 5}, "memoryBudget"),
                       ({"contextMode": "tiny"}, "contextMode")):
        with pytest.raises(ConfigError, match=named):
            validate(bad)
