"""What a child is born with: its name, its purpose and its creator's message, checked before anything is created,
and the ``genesis.json`` written into its sandbox (README: Children)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from automaton_min.errors import UserError

NAME_LIMIT = 64
PROMPT_LIMIT = 20_000  # the configuration's genesisPrompt limit
MESSAGE_LIMIT = 2_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]*")


@dataclass(frozen=True)
class Genesis:
    name: str
    prompt: str
    creator_message: str | None


def check_genesis(name: str, prompt: str, creator_message: str | None) -> Genesis:
    """The genesis, or ``UserError`` naming what is wrong: a name of 1 to 64 plain characters, a purpose that is
    there and within 20,000 characters, and no text that the injection defence rates high or critical."""
    from automaton_min.social.injection import detect, threat_level

    name, prompt = (name or "").strip(), (prompt or "").strip()
    message = (creator_message or "").strip() or None
    if not name or len(name) > NAME_LIMIT or not _NAME.fullmatch(name):
        raise UserError(f"name: 1 to {NAME_LIMIT} letters, digits, spaces, dots, dashes or underscores")
    if not prompt or len(prompt) > PROMPT_LIMIT:
        raise UserError(f"genesis_prompt: the child's purpose, 1 to {PROMPT_LIMIT} characters")
    if message is not None and len(message) > MESSAGE_LIMIT:
        raise UserError(f"creator_message: at most {MESSAGE_LIMIT} characters")
    for field, text in (("genesis_prompt", prompt), ("creator_message", message or "")):
        found = detect(text)
        if threat_level(found) in ("high", "critical"):
            raise UserError(f"{field}: it reads as an injection ({', '.join(sorted(found))}); write it plainly")
    return Genesis(name, prompt, message)


def constitution_hash(path: Path) -> str:
    """The sha256 of a constitution file, as ``verify_child_constitution`` compares it."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def genesis_json(genesis: Genesis, *, parent_address: str, constitution_sha256: str, chain_type: str = "evm",
                 conway_api_url: str | None = None) -> str:
    """``genesis.json`` for the child's home: no key of the parent's, no API key, only who and what it is (and the
    Conway API it signs in to, a public URL)."""
    fields = {"name": genesis.name, "genesisPrompt": genesis.prompt, "creatorMessage": genesis.creator_message,
              "parentAddress": parent_address, "constitutionHash": constitution_sha256, "chainType": chain_type}
    if conway_api_url:
        fields["conwayApiUrl"] = conway_api_url
    return orjson.dumps(fields, option=orjson.OPT_INDENT_2).decode()
