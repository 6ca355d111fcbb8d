"""The configuration in ``automaton.json`` (README: Configuration): defaults, loading, validation, saving, redaction."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import orjson

from automaton_min import __version__
from automaton_min.clock import HOUR_MS
from automaton_min.errors import ConfigError
from automaton_min.fileio import atomic_write
from automaton_min.home import Home
from automaton_min.net.url import UnreadableUrl, read_url

# Merged under the file once, at load; treasury/money_out.py reads the result (treasury_policy).
DEFAULT_TREASURY_POLICY: dict[str, Any] = {
    "maxSingleTransferCents": 5000,
    "maxHourlyTransferCents": 10000,
    "maxDailyTransferCents": 25000,
    "minimumReserveCents": 1000,
    "maxX402PaymentCents": 100,
    "x402AllowedDomains": ["conway.tech"],
    "transferCooldownMs": 0,
    "maxTransfersPerTurn": 2,
    "maxInferenceDailyCents": 50000,
    "requireConfirmationAboveCents": 1000,
    "x402MaxValiditySeconds": 300,  # a signed authorization expires this soon, whatever the server asks
    "x402HostCooldownMs": HOUR_MS,  # a host that took a signature without delivering is not paid again this long
    "knownPayees": [],  # addresses credits may go to without the creator's approval (treasury/payees.py)
}

DEFAULT_MODEL_STRATEGY: dict[str, Any] = {
    "inferenceModel": "gpt-5.2",
    "lowComputeModel": "gpt-5-mini",
    "criticalModel": "gpt-5-mini",
    "maxTokensPerTurn": 4096,
    "hourlyBudgetCents": 0,
    "sessionBudgetCents": 0,
    "perCallCeilingCents": 0,
    "enableModelFallback": True,
    "anthropicApiVersion": "2023-06-01",
}

DEFAULT_SOUL_CONFIG: dict[str, Any] = {
    "soulAlignmentThreshold": 0.5,
    "requireCreatorApprovalForPurposeChange": False,
    "enableSoulReflection": True,
}

DEFAULT_RETENTION: dict[str, Any] = {
    "turnsKeep": 10_000,  # the heartbeat's retention task keeps this many newest turns
}

DEFAULTS: dict[str, Any] = {
    "conwayApiUrl": "https://api.conway.tech",
    "inferenceModel": "gpt-5.2",
    "maxTokensPerTurn": 4096,
    "heartbeatConfigPath": "~/.automaton/heartbeat.yml",
    "dbPath": "~/.automaton/state.db",
    "logLevel": "info",
    "version": __version__,
    "skillsDir": "~/.automaton/skills",
    "maxChildren": 3,
    "maxTurnsPerCycle": 25,
    "childSandboxMemoryMb": 1024,
    "socialRelayUrl": "https://social.conway.tech",
    "chainType": "evm",
    "treasuryPolicy": DEFAULT_TREASURY_POLICY,
    "modelStrategy": DEFAULT_MODEL_STRATEGY,
    "soulConfig": DEFAULT_SOUL_CONFIG,
    "retention": DEFAULT_RETENTION,
}

# Environment variables that override a key for this process only (never saved).
ENV_OVERRIDES: dict[str, str] = {
    "CONWAY_API_KEY": "conwayApiKey",
    "OLLAMA_BASE_URL": "ollamaBaseUrl",
    "AUTOMATON_RPC_URL": "rpcUrl",
    "SOCIAL_RELAY_URL": "socialRelayUrl",
}

SECRET_KEYS = frozenset({"conwayApiKey", "openaiApiKey", "anthropicApiKey"})
LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "fatal")
CONTEXT_MODES = ("auto", "compact", "full")
ACTION_MODES = ("auto", "stepwise", "direct")

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_DOMAIN = re.compile(rf"(?=.{{1,253}}\Z)(?:{_LABEL}\.)*{_LABEL}")

Rule = Callable[[Any], "str | None"]


def _text(max_len: int = 100_000, required: bool = False) -> Rule:
    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return "expected a string"
        if required and not value.strip():
            return "expected a non-empty string"
        if len(value) > max_len:
            return f"expected at most {max_len} characters"
        return None
    return check


def _address(value: Any) -> str | None:
    if not isinstance(value, str) or not _ADDRESS.fullmatch(value):
        return "expected a 0x-prefixed 40-hex-digit address"
    return None


def _url(value: Any) -> str | None:
    if not isinstance(value, str) or not re.match(r"https?://[^\s/]+\S*\Z", value):
        return "expected an http:// or https:// URL"
    try:  # one reading: what doctor, the wizard and the clients take for its host is the host it reaches
        read_url(value)
    except UnreadableUrl as exc:
        return f"expected an http:// or https:// URL ({exc})"
    return None


def _url_or_empty(value: Any) -> str | None:
    """A URL, or ``""`` meaning "none" (``socialRelayUrl: ""``: no relay)."""
    return None if value == "" else _url(value)


def _integer(low: int, high: int) -> Rule:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"expected a whole number from {low} to {high}"
        return None
    return check


def _number(low: float, high: float) -> Rule:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            return f"expected a number from {low} to {high}"
        return None
    return check


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "expected true or false"


def _choice(*options: str) -> Rule:
    def check(value: Any) -> str | None:
        return None if value in options else f"expected one of {', '.join(options)}"
    return check


def _timezone(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return "expected an IANA time zone name such as Europe/Berlin, or UTC"
    if value.upper() == "UTC":
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        return "expected an IANA time zone name this system knows, such as Europe/Berlin, or UTC"
    return None


def _chain_type(value: Any) -> str | None:
    if value == "solana":
        return "solana is not supported by automaton-min; only evm"
    return _choice("evm")(value)


def _addresses(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > 1000 or not all(_address(a) is None for a in value):
        return 'expected a list of at most 1000 0x addresses like ["0xabc..."]'
    return None


def _domains(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(d, str) and _DOMAIN.fullmatch(d) for d in value):
        return 'expected a list of domain names like ["conway.tech"]'
    return None


_CENTS = _integer(0, 10**12)

RULES: dict[str, Rule] = {
    "name": _text(64, required=True),
    "genesisPrompt": _text(20_000),
    "creatorMessage": _text(20_000),
    "creatorAddress": _address,
    "walletAddress": _address,
    "parentAddress": _address,
    "sandboxId": _text(200),
    "agentId": _text(200),
    "conwayApiUrl": _url,
    "socialRelayUrl": _url_or_empty,
    "updates": _choice("apply", "check", "off"),  # check_for_updates; default apply (under the unit)
    "updateManifestUrl": _url_or_empty,  # the signed release manifest; default: the one built into the binary
    "socialPollIntervalSeconds": _integer(10, 86_400),  # check_social_inbox; default 120 (heartbeat/social_inbox.py)
    "approvalExpiryHours": _integer(1, 720),  # a creator approval request waits this long; default 24
    "openaiBaseUrl": _url,
    "ollamaBaseUrl": _url,
    "rpcUrl": _url,
    "conwayApiKey": _text(1000),
    "openaiApiKey": _text(1000),
    "anthropicApiKey": _text(1000),
    "registeredWithConway": _boolean,
    "unconfinedExec": _boolean,
    "localOnly": _boolean,  # no social relay, no RPC node: no balance read, nothing paid (local_only below)
    "trustSystemClock": _boolean,  # observe/clock_trust.py: believe the clock without NTP (set by hand, an RTC)
    "shutdownGraceSeconds": _integer(1, 600),
    "execConfinement": _choice("auto", "landlock", "namespace"),
    "inferenceModel": _text(200, required=True),
    "maxTokensPerTurn": _integer(1, 1_000_000),
    "maxTurnsPerCycle": _integer(1, 10_000),
    "maxChildren": _integer(0, 100),
    "childSandboxMemoryMb": _integer(1, 1 << 20),
    "logLevel": _choice(*LOG_LEVELS),
    "chainType": _chain_type,
    "heartbeatConfigPath": _text(4096, required=True),
    "heartbeatTimezone": _timezone,  # the heartbeat's crons run in this zone; unset: UTC
    "retention.turnsKeep": _integer(100, 100_000_000),
    "dbPath": _text(4096, required=True),
    "skillsDir": _text(4096, required=True),
    "version": _text(100),
    **{f"treasuryPolicy.{k}": _CENTS for k in DEFAULT_TREASURY_POLICY
       if k not in ("x402AllowedDomains", "knownPayees")},
    "treasuryPolicy.x402AllowedDomains": _domains,
    "treasuryPolicy.knownPayees": _addresses,
    "treasuryPolicy.x402MaxValiditySeconds": _integer(10, 86_400),
    "modelStrategy.inferenceModel": _text(200, required=True),
    "modelStrategy.lowComputeModel": _text(200, required=True),
    "modelStrategy.criticalModel": _text(200, required=True),
    "modelStrategy.maxTokensPerTurn": _integer(1, 1_000_000),
    "modelStrategy.hourlyBudgetCents": _CENTS,
    "modelStrategy.sessionBudgetCents": _CENTS,
    "modelStrategy.perCallCeilingCents": _CENTS,
    "modelStrategy.enableModelFallback": _boolean,
    "modelStrategy.anthropicApiVersion": _text(100, required=True),
    "modelStrategy.contextWindow": _integer(0, 100_000_000),  # 0: ask the server, else the registry
    "modelStrategy.temperature": _number(0, 2),  # unset: the server's default
    "modelStrategy.seed": _integer(0, 2**31 - 1),  # unset: none sent (servers that take one repeat their answers)
    "modelStrategy.inputCostPer1k": _integer(0, 10**9),  # models the registry does not know; 1/100 cent per 1k tokens
    "modelStrategy.outputCostPer1k": _integer(0, 10**9),
    **{f"memoryBudget.{kind}": _integer(0, 1_000_000)  # tokens per memory type in one context (memory/retrieval.py)
       for kind in ("working", "episodic", "semantic", "procedural", "relationship")},
    "contextMode": _choice(*CONTEXT_MODES),  # auto: compact tools and prompt for windows of 8k tokens or less
    "actionMode": _choice(*ACTION_MODES),  # auto: stepwise when compact (agent/stepwise.py)
    "soulConfig.soulAlignmentThreshold": _number(0, 1),
    "soulConfig.requireCreatorApprovalForPurposeChange": _boolean,
    "soulConfig.enableSoulReflection": _boolean,
}

_SECTIONS = ("treasuryPolicy", "modelStrategy", "soulConfig", "retention", "memoryBudget")


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on top of ``base``; nested objects merge key by key, ``None`` leaves the base."""
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        elif value is not None or key not in merged:
            merged[key] = copy.deepcopy(value)
    return merged


def validate(data: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` naming the first key that breaks its rule."""
    for section in _SECTIONS:
        if section in data and not isinstance(data[section], Mapping):
            raise ConfigError(f"{section}: expected an object")
    for dotted, rule in RULES.items():
        value = _lookup(data, dotted)
        if value is None:
            continue
        problem = rule(value)
        if problem:
            shown = "" if dotted.split(".")[-1] in SECRET_KEYS else f" (got {_preview(value)})"
            raise ConfigError(f"{dotted}: {problem}{shown}")


def check_value(key: str, value: Any) -> str | None:
    """The rule ``key`` breaks with ``value`` (``"expected ..."``), or ``None`` when it is fine."""
    rule = RULES.get(key)
    return rule(value) if rule else None


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _preview(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Config:
    """A loaded configuration: ``stored`` is ``automaton.json`` over the defaults; ``values`` adds the process-only
    layers (environment overrides, the provisioned API key)."""

    stored: dict[str, Any]
    values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values.get(key)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    def redacted(self) -> dict[str, Any]:
        """The effective values with every secret masked."""
        return {k: (redact_secret(v) if k in SECRET_KEYS and v else v) for k, v in self.values.items()}


def redact_secret(secret: str) -> str:
    """Mask a secret, keeping its last four characters when it is long enough to spare them."""
    return "****" + secret[-4:] if len(secret) >= 16 else "****"


# The same fix from every command that reads automaton.json, so no hint sends the user round in a circle.
CONFIG_JSON_FIX = "fix the JSON by hand (the wallet is untouched), or move it aside and run: automaton-min setup"


def _read_json_object(path: Path, fix: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror}); {fix}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level; {fix}")
    return data


def load_config(home: Home, environ: Mapping[str, str] | None = None) -> Config:
    """Load, merge and validate ``automaton.json`` from ``home``; raise ``ConfigError`` on any problem."""
    environ = os.environ if environ is None else environ
    path = home.config_path
    if not path.exists():
        raise ConfigError(f"no configuration at {path}; run: automaton-min setup")
    file_data = _read_json_object(path, CONFIG_JSON_FIX)
    stored = deep_merge(DEFAULTS, file_data)
    try:
        validate(stored)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None

    values = copy.deepcopy(stored)
    if not values.get("conwayApiKey") and home.api_key_path.exists():
        provisioned = _read_json_object(home.api_key_path, "fix it or provision the API key again").get("apiKey")
        if isinstance(provisioned, str) and provisioned:
            values["conwayApiKey"] = provisioned
    for env_name, key in ENV_OVERRIDES.items():
        if environ.get(env_name):
            problem = check_value(key, environ[env_name])
            if problem:
                raise ConfigError(f"environment variable {env_name} ({key}): {problem}; fix or unset it")
            values[key] = environ[env_name]
    return Config(stored=stored, values=values)


LOCAL_ONLY_ON = "automaton-min config set localOnly true"
LOCAL_ONLY_OFF = "automaton-min config set localOnly false"
# Said where a local-only agent refuses to pay (treasury/payer.py): it cannot read its balance, so it signs nothing.
LOCAL_ONLY_NO_PAYMENTS = ("the agent is local only (localOnly is true): no RPC node reads its balance, so nothing is "
                          f"signed or paid; the owner turns payments back on with: {LOCAL_ONLY_OFF}")

LOCAL_ONLY_NO_RELAY = ("the agent is local only (localOnly is true): there is no social relay, so no message leaves or "
                       f"arrives; the owner turns it back on with: {LOCAL_ONLY_OFF}")


def local_only(config: Any) -> bool:
    """``localOnly`` is on: the agent uses no social relay and no RPC node (README: Local model, no money)."""
    return config is not None and config.get("localOnly") is True


def relay_url(config: Any) -> str | None:
    """``socialRelayUrl`` when a relay is in use, else None (empty, or a local-only agent)."""
    if config is None or local_only(config):
        return None
    return (config.get("socialRelayUrl") or "").strip() or None


def config_from(data: Mapping[str, Any]) -> Config:
    """Build a validated ``Config`` from a mapping (as ``setup`` does before saving)."""
    stored = deep_merge(DEFAULTS, data)
    validate(stored)
    return Config(stored=stored, values=copy.deepcopy(stored))


def save_config(home: Home, config: Config) -> None:
    """Write the stored layer of ``config`` to ``automaton.json`` atomically with mode 0600."""
    validate(config.stored)
    atomic_write(home.config_path, orjson.dumps(config.stored, option=orjson.OPT_INDENT_2) + b"\n", 0o600)


def db_path(home: Home, config: Config | None) -> Path:
    """Where ``state.db`` lives for this home and config."""
    if config is None:
        return home.default_db_path
    return home.resolve(config.get("dbPath", DEFAULTS["dbPath"]))
