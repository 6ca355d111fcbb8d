"""Spawning a child from start to a verified wallet, and picking up a spawn a killed parent left half done
(README: Children). Each step is in ``child_lifecycle_events`` before the next begins."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from automaton_min.children.genesis import Genesis, genesis_json
from automaton_min.children.lifecycle import request, transition
from automaton_min.children.spawn import ensure_runtime, ensure_sandbox, ensure_wallet
from automaton_min.clock import HOUR_MS
from automaton_min.errors import RuntimeFailure
from automaton_min.store.children import Child, get_child, list_children, names_by_address
from automaton_min.store.kv import get_value, set_value
from automaton_min.update.manifest import Refused

if TYPE_CHECKING:
    from automaton_min.conway.client import ConwayClient
    from automaton_min.store.sqlite import Database
    from automaton_min.update.baked import Build

IN_PROGRESS = ("requested", "sandbox_created", "runtime_ready")
TOPUP_KEY = "last_sandbox_topup_attempt"
TOPUP_COOLDOWN_MS = HOUR_MS


@dataclass(frozen=True)
class Parent:
    """What spawning needs from the parent: its stores, its Conway client, the release its children's binary comes
    from, and what it tells a child about itself (never a key)."""

    db: "Database"
    client: "ConwayClient"
    build: "Build"
    manifest_url: str
    address: str
    constitution_sha256: str
    conway_api_url: str
    memory_mb: int
    now: Callable[[], int]
    topup: Callable[[], str] | None = None  # buys the smallest credit tier; None: no USDC path
    creator: str | None = None  # the parent's creator: never a child's address

    @classmethod
    def of(cls, db: "Database", client: "ConwayClient", build: "Build", config: Any, *, address: str,
           constitution: Path, now: Callable[[], int], topup: Callable[[], str] | None = None) -> "Parent":
        """The parent as its configuration and home describe it (the tool and the heartbeat build it so)."""
        from automaton_min.children.genesis import constitution_hash
        from automaton_min.children.ready import manifest_url
        from automaton_min.conway.client import DEFAULT_API_URL

        return cls(db, client, build, manifest_url(config, build), address, constitution_hash(constitution),
                   config.get("conwayApiUrl") or DEFAULT_API_URL, int(config.get("childSandboxMemoryMb") or 1024),
                   now, topup, config.get("creatorAddress"))


def spawn(parent: Parent, child_id: str, genesis: Genesis) -> Child:
    """A new child (``requested``) carried to ``wallet_verified``; a second call with the same id resumes it."""
    request(parent.db, child_id, genesis.name, genesis.prompt, genesis.creator_message, parent.now())
    return advance(parent, child_id)


def advance(parent: Parent, child_id: str) -> Child:
    """The steps still to do, in order. A refusal (a bad release, a child that will not install or make a wallet)
    fails the child; a Conway error leaves it where it is, for the next attempt."""
    child = get_child(parent.db, child_id)
    genesis = Genesis(child.name, _prompt(parent.db, child_id), _message(parent.db, child_id))
    try:
        child = _sandbox(parent, child)
        child = ensure_runtime(parent.db, parent.client, child, parent.build, parent.manifest_url,
                               now_ms=parent.now())
        text = genesis_json(genesis, parent_address=parent.address, constitution_sha256=parent.constitution_sha256,
                            conway_api_url=parent.conway_api_url)
        taken = frozenset(a.lower() for a in (parent.address, parent.creator, *names_by_address(parent.db)) if a)
        return ensure_wallet(parent.db, parent.client, child, text, now_ms=parent.now(), taken=taken)
    except Refused as exc:
        transition(parent.db, child_id, "failed", str(exc)[:500], parent.now())
        raise


def resume_all(parent: Parent) -> list[str]:
    """Every spawn a killed parent left before ``wallet_verified``, carried on; one line each."""
    lines = []
    for child in list_children(parent.db):
        if child.status not in IN_PROGRESS:
            continue
        try:
            done = advance(parent, child.id)
            lines.append(f"{child.name}: resumed, now {done.status}")
        except RuntimeFailure as exc:  # a Conway error, an unreachable or refused release: the others go on
            lines.append(f"{child.name}: {get_child(parent.db, child.id).status}: {exc}")
    return lines


def _sandbox(parent: Parent, child: Child) -> Child:
    """``ensure_sandbox``; a 402 (no credits for it) buys the smallest tier once and tries once more, at most once
    an hour (KV ``last_sandbox_topup_attempt``)."""
    from automaton_min.conway.client import ConwayError

    try:
        return ensure_sandbox(parent.db, parent.client, child, memory_mb=parent.memory_mb, now_ms=parent.now())
    except ConwayError as exc:
        if exc.status != 402 or parent.topup is None:
            raise
        last = get_value(parent.db, TOPUP_KEY)
        if last is not None and last.isdigit() and parent.now() - int(last) < TOPUP_COOLDOWN_MS:
            raise Refused(f"Conway wants credits for the sandbox (402) and a top-up was tried less than an hour "
                          f"ago: {exc}") from None
        with parent.db.transaction():
            set_value(parent.db, TOPUP_KEY, str(parent.now()), parent.now())
        parent.topup()
    return ensure_sandbox(parent.db, parent.client, child, memory_mb=parent.memory_mb, now_ms=parent.now())


def _prompt(db: "Database", child_id: str) -> str:
    return str(db.scalar("SELECT genesis_prompt FROM children WHERE id = ?", (child_id,)) or "")


def _message(db: "Database", child_id: str) -> str | None:
    value = db.scalar("SELECT creator_message FROM children WHERE id = ?", (child_id,))
    return str(value) if value else None
