"""Bringing an automaton into being: ``init`` (home + wallet) and ``setup`` (config, soul, constitution, identity)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from automaton_min.agent.constitution import CONSTITUTION
from automaton_min.agent.soul import initial_soul, record_soul, rename_soul
from automaton_min.chain.address import has_valid_checksum
from automaton_min.chain.wallet import Wallet, ensure_wallet
from automaton_min.clock import Clock, system_now, to_iso
from automaton_min.config import CONFIG_JSON_FIX, check_value, config_from, db_path, save_config
from automaton_min.errors import ConfigError
from automaton_min.fileio import atomic_write
from automaton_min.home import Home
from automaton_min.ids import new_ulid
from automaton_min.store.db import open_database
from automaton_min.store.identity import write_identity

SANDBOX_FILE = Path("/etc/conway/sandbox.json")


@dataclass
class SetupAnswers:
    """What the setup wizard (or its flags) decided. ``None`` leaves the current value."""

    name: str
    genesis_prompt: str
    creator_address: str
    creator_message: str | None = None
    sandbox_id: str | None = None
    conway_api_url: str | None = None
    openai_base_url: str | None = None
    inference_model: str | None = None
    conway_api_key: str | None = None
    openai_api_key: str | None = None
    anthropic_api_key: str | None = None
    local_only: bool | None = None  # localOnly: no social relay, no RPC node, nothing paid

    def config_values(self) -> dict[str, Any]:
        """These answers as ``automaton.json`` keys (unanswered ones left out)."""
        values = {
            "name": self.name.strip(),
            "genesisPrompt": self.genesis_prompt,
            "creatorAddress": self.creator_address.strip(),
            "creatorMessage": self.creator_message,
            "sandboxId": self.sandbox_id.strip() if self.sandbox_id is not None else None,
            "conwayApiUrl": self.conway_api_url,
            "openaiBaseUrl": self.openai_base_url,
            "inferenceModel": self.inference_model,
            "conwayApiKey": self.conway_api_key,
            "openaiApiKey": self.openai_api_key,
            "anthropicApiKey": self.anthropic_api_key,
            "localOnly": self.local_only,
        }
        # An empty answer keeps the current value, except an empty sandbox id, which means local mode.
        return {k: v for k, v in values.items() if v is not None and (v != "" or k == "sandboxId")}


# Setup answer -> (config key, flag, what a blank answer means to the user, what to type in the wizard).
ANSWER_KEYS = {
    "name": ("name", "--name", "the name", "a name for the agent"),
    "genesis_prompt": ("genesisPrompt", "--genesis-prompt", "the genesis prompt (its purpose)",
                       "its purpose, in a sentence or more"),
    "creator_address": ("creatorAddress", "--creator-address", "the creator address",
                        "your own wallet's 0x address (you own the agent)"),
}


def answer_problem(field: str, value: str, *, asking: bool = False) -> str | None:
    """Why a required setup answer cannot be used (one line naming the fix), or ``None``.

    ``asking``: the wizard's wording, whose fix is to type the answer again, not a flag."""
    key, flag, what, wanted = ANSWER_KEYS[field]
    if not value.strip():
        return f"{what} is required; type {wanted}" if asking else f"{what} is blank; give {flag} some text"
    value = value.strip() if field != "genesis_prompt" else value
    problem = check_value(key, value)
    if problem:
        return f"{key}: {problem} (got {value[:60]!r}); " + ("type it again" if asking else f"fix {flag}")
    if field == "creator_address" and not has_valid_checksum(value):
        return (f"creatorAddress: {value} fails its EIP-55 checksum (a mistyped letter or case); "
                "copy the address again from your wallet")
    return None


def check_answers(answers: "SetupAnswers") -> None:
    """Raise ``ConfigError`` for the first required answer that cannot be used."""
    for field in ANSWER_KEYS:
        problem = answer_problem(field, getattr(answers, field) or "")
        if problem:
            raise ConfigError(problem)


@dataclass
class SetupResult:
    home: Path
    name: str
    address: str
    wallet_created: bool
    written: list[str] = field(default_factory=list)


def detect_sandbox_id(environ: dict[str, str] | None = None) -> str:
    """The Conway sandbox this runs in, if any: ``CONWAY_SANDBOX_ID``, then ``/etc/conway/sandbox.json``."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get("CONWAY_SANDBOX_ID"):
        return environ["CONWAY_SANDBOX_ID"].strip()
    try:
        data = orjson.loads(SANDBOX_FILE.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return ""
    sandbox = data.get("id") if isinstance(data, dict) else None
    return sandbox.strip() if isinstance(sandbox, str) else ""


def init_home(home: Home, now: Clock = system_now) -> tuple[Wallet, bool]:
    """Create the home (0700) and its wallet if missing. Returns (wallet, created)."""
    home.ensure()
    return ensure_wallet(home.wallet_path, now)


def existing_config_values(home: Home) -> dict[str, Any]:
    """What ``automaton.json`` holds now, unvalidated (so setup can repair a broken value)."""
    if not home.config_path.exists():
        return {}
    try:
        data = orjson.loads(home.config_path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{home.config_path} is not valid JSON ({exc}); {CONFIG_JSON_FIX}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{home.config_path}: expected a JSON object; fix it or move it aside")
    return data


def setup_agent(home: Home, answers: SetupAnswers, now: Clock = system_now) -> SetupResult:
    """Write ``automaton.json``, ``SOUL.md``, ``constitution.md`` and the identity rows, all validated first. Again, it
    keeps every other key, an existing ``SOUL.md``'s text but its name lines, and ``constitution.md``."""
    check_answers(answers)
    current = existing_config_values(home)
    values = {**current, **answers.config_values()}
    if answers.inference_model:
        values["modelStrategy"] = {**(values.get("modelStrategy") or {}), "inferenceModel": answers.inference_model}
    values["registeredWithConway"] = bool(values.get("conwayApiKey")) or bool(values.get("registeredWithConway"))
    config_from({k: v for k, v in values.items() if k != "walletAddress"})  # fail before touching any file

    wallet, wallet_created = init_home(home, now)
    values["walletAddress"] = wallet.address
    config = config_from(values)
    save_config(home, config)
    written = [home.config_path.name]

    old_soul = None
    if not home.soul_path.exists():
        soul = initial_soul(config["name"], wallet.address, config["creatorAddress"], config.get("genesisPrompt", ""))
        atomic_write(home.soul_path, soul.encode(), 0o600)
        written.append(home.soul_path.name)
    else:
        old_soul = home.soul_path.read_text(encoding="utf-8")
        new_soul = rename_soul(old_soul, current.get("name"), config["name"])
        if new_soul != old_soul:
            atomic_write(home.soul_path, new_soul.encode(), 0o600)
            written.append(home.soul_path.name)
    if not home.constitution_path.exists():
        atomic_write(home.constitution_path, CONSTITUTION.encode(), 0o444)
        written.append(home.constitution_path.name)

    with open_database(db_path(home, config), now=now) as db, db.transaction():
        if home.soul_path.name in written:  # the first soul, or the creator's new name in it
            record_soul(db, home.soul_path.read_text(encoding="utf-8"), "genesis" if old_soul is None else "human",
                        "written by setup", now())
        write_identity(
            db,
            {
                "name": config["name"],
                "address": wallet.address,
                "creator": config["creatorAddress"],
                "chainType": "evm",
                "sandbox": config.get("sandboxId", ""),
                "createdAt": to_iso(now()),
                "automatonId": new_ulid(now()),
            },
            keep_existing=("createdAt", "automatonId"),
        )
    written.append(db_path(home, config).name)
    return SetupResult(home.root, config["name"], wallet.address, wallet_created, written)
