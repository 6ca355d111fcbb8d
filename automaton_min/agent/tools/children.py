"""Children tools: spawn_child, start_child, fund_child, list_children, check_child_status, message_child,
verify_child_constitution, prune_dead_children (README: Children). The work is in ``automaton_min.children``; these
turn it into results the model reads."""

from __future__ import annotations

import hashlib
from typing import Any

from automaton_min.agent.tools.base import ToolContext, ToolFailure
from automaton_min.agent.tools.loop_control import TRANSFERS_KEY, need, setting, tool_family
from automaton_min.agent.tools.survival import MAX_MESSAGE_CHARS, run_send_message
from automaton_min.config import relay_url
from automaton_min.errors import AutomatonError, UserError

CHILD_ID = {"type": "string", "minLength": 1, "maxLength": 64, "description": "The child's id (list_children)"}


def _child(ctx: ToolContext, child_id: str):
    from automaton_min.store.children import get_child

    child = get_child(ctx.db, child_id)
    if child is None:
        raise ToolFailure(f"no child {child_id!r}; list_children shows your children and their ids")
    return child


def _parent(ctx: ToolContext):
    from automaton_min.children.pipeline import Parent
    from automaton_min.children.ready import spawn_blocker
    from automaton_min.conway.client import DEFAULT_API_URL
    from automaton_min.update.baked import this_build

    build, home = ctx.services.release or this_build(), need(ctx, "home")
    blocker = spawn_blocker(ctx.config, build) or ("no Conway client in this run" if ctx.services.conway is None
                                                   else None)
    if blocker:
        raise ToolFailure(f"no child can be spawned here: {blocker}")
    payer = ctx.services.payer

    def topup() -> str:
        from automaton_min.treasury.topup import topup as buy

        return str(buy(payer, setting(ctx, "conwayApiUrl", DEFAULT_API_URL), 5).credits_cents_added)

    return Parent.of(ctx.db, need(ctx, "conway"), build, ctx.config, address=need(ctx, "wallet_address"),
                     constitution=home.constitution_path, now=ctx.now, topup=topup if payer is not None else None)


def _new_child_id(ctx: ToolContext) -> str:
    """From the turn and the call when there are both (a replayed turn resumes the same child), else new."""
    from automaton_min.ids import new_ulid

    if ctx.turn_id is not None and ctx.call_index is not None:
        return hashlib.sha256(f"{ctx.turn_id}:{ctx.call_index}".encode()).hexdigest()[:20]
    return new_ulid(ctx.now()).lower()


def run_spawn_child(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.children.genesis import check_genesis
    from automaton_min.children.pipeline import spawn
    from automaton_min.store.children import counts, get_child

    try:
        genesis = check_genesis(args["name"], args["genesis_prompt"], args.get("creator_message"))
    except UserError as exc:
        raise ToolFailure(f"not spawned: {exc}") from None
    child_id = _new_child_id(ctx)
    most = int(setting(ctx, "maxChildren", 3))
    if get_child(ctx.db, child_id) is None and counts(ctx.db)[0] >= most:
        raise ToolFailure(f"not spawned: you have {counts(ctx.db)[0]} living children and maxChildren is {most}; "
                          "prune_dead_children or wait")
    parent = _parent(ctx)
    try:
        child = spawn(parent, child_id, genesis)
    except AutomatonError as exc:
        state = get_child(ctx.db, child_id)
        where = f" (child {child_id} is {state.status})" if state is not None else ""
        raise ToolFailure(f"spawn stopped{where}: {exc}") from None
    return (f"Child {child.name} (id {child.id}) is {child.status}: sandbox {child.sandbox_id}, its own wallet "
            f"{child.address}. Next: fund_child to give it credits, then start_child.")


def run_start_child(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.children.running import start_child
    from automaton_min.conway.client import DEFAULT_API_URL

    child = _child(ctx, args["child_id"])
    try:
        child = start_child(ctx.db, need(ctx, "conway"), child, conway_api_url=setting(ctx, "conwayApiUrl",
                                                                                       DEFAULT_API_URL),
                            relay_url=relay_url(ctx.config), now_ms=ctx.now())
    except AutomatonError as exc:
        raise ToolFailure(f"not started: {exc}") from None
    return f"Child {child.name} is starting; check_child_status tells when it runs."


def run_fund_child(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.agent.tools.money import dollars
    from automaton_min.children.funding import fund_child
    from automaton_min.conway.client import ConwayError
    from automaton_min.treasury.money_out import TransferRefused, definitely_refused, treasury_policy
    from automaton_min.treasury.spend import SpendTracker

    child = _child(ctx, args["child_id"])
    extra = getattr(ctx.services.loop, "extra", None)
    so_far = int(extra.get(TRANSFERS_KEY, 0)) if isinstance(extra, dict) else 0
    sent = lambda: extra.__setitem__(TRANSFERS_KEY, so_far + 1) if isinstance(extra, dict) else None  # noqa: E731
    try:
        result = fund_child(ctx.db, need(ctx, "conway"), treasury_policy(ctx.config), ctx.config,
                            child_id=child.id, amount_cents=args["amount_cents"], note=args.get("reason"),
                            transfers_this_turn=so_far, now_ms=ctx.now(), spend=SpendTracker(ctx.db, ctx.now))
    except UserError as exc:
        raise ToolFailure(f"not funded: {exc}") from None
    except TransferRefused as exc:
        raise ToolFailure(f"not funded: {exc.refusal.sentence()}") from None
    except ConwayError as exc:
        if definitely_refused(exc):
            raise ToolFailure(f"not funded, Conway refused: {exc}") from None
        sent()
        raise ToolFailure(f"funding outcome unknown: {exc}. It is sent again, once, under the same name at the "
                          "next fund_child or health check; do not send more meanwhile") from None
    sent()
    return f"Sent {dollars(result.amount_cents)} of credits to child {child.name} ({child.address})."


def run_list_children(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.store.children import list_children

    children = list_children(ctx.db)
    if not children:
        return "No children."
    return "\n".join(f"{c.id}  {c.name}  {c.status}  funded {c.funded_amount_cents} cents  wallet {c.address or '-'}"
                     f"  last checked {c.last_checked or 'never'}" for c in children)


def run_check_child_status(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.children.running import look_at, record_health

    child = _child(ctx, args["child_id"])
    health = look_at(need(ctx, "conway"), child)
    child = record_health(ctx.db, child, health, ctx.now())
    last = ctx.db.query_one("SELECT received_at, content FROM inbox_messages WHERE signed_by = ? "
                            "ORDER BY received_at DESC LIMIT 1", ((child.address or "").lower(),))
    said = f"; its last message ({last[0]}): {str(last[1])[:300]!r}" if last else "; no message from it yet"
    return f"Child {child.name} is {child.status}: {health.sentence()}{said}"


def run_message_child(ctx: ToolContext, args: dict[str, Any]) -> str:
    child = _child(ctx, args["child_id"])
    if not child.address:
        raise ToolFailure(f"child {child.name} has no verified wallet yet, so nothing can reach it")
    return run_send_message(ctx, {"to_address": child.address, "content": args["content"]})


def run_verify_child_constitution(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.children.genesis import constitution_hash
    from automaton_min.children.running import CHILD_HOME

    child = _child(ctx, args["child_id"])
    if not child.sandbox_id:
        raise ToolFailure(f"child {child.name} has no sandbox yet")
    ours = constitution_hash(need(ctx, "home").constitution_path)
    ran = need(ctx, "conway").exec(f"sha256sum {CHILD_HOME}/constitution.md", 30, sandbox_id=child.sandbox_id)
    theirs = (ran.stdout.split() or [""])[0]
    if theirs == ours:
        return f"Child {child.name}'s constitution matches yours (sha256 {ours})."
    return (f"Child {child.name}'s constitution does NOT match yours: theirs {theirs or 'unreadable'}, yours {ours}"
            f"{' (' + ran.stderr.strip()[:200] + ')' if ran.stderr.strip() else ''}.")


def run_prune_dead_children(ctx: ToolContext, args: dict[str, Any]) -> str:
    from automaton_min.children.running import prune_dead

    cleaned = prune_dead(ctx.db, ctx.services.conway, keep=args.get("keep_last", 5), now_ms=ctx.now())
    return f"Cleaned up {len(cleaned)} dead children" + (f": {', '.join(cleaned)}." if cleaned else ".")


_tool = tool_family("replication")


TOOLS = (
    _tool("spawn_child", "Create a child agent in its own Conway sandbox, running the signed release, with its own "
          "wallet. It costs a sandbox; at most maxChildren living children and 3 spawns a day.",
          {"name": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The child's name"},
           "genesis_prompt": {"type": "string", "minLength": 1, "maxLength": 20_000,
                              "description": "The child's purpose"},
           "creator_message": {"type": "string", "maxLength": 2000, "description": "A message for its first run"}},
          ["name", "genesis_prompt"], run_spawn_child, risk="dangerous", mutating=True),
    _tool("start_child", "Start (or restart) a child's agent in its sandbox; fund it first.",
          {"child_id": CHILD_ID}, ["child_id"], run_start_child, risk="caution", mutating=True),
    _tool("fund_child", "Send Conway credits to a child whose wallet you verified, within your treasury limits "
          "(never more than half your balance; large amounts wait for your creator's approval).",
          {"child_id": CHILD_ID,
           "amount_cents": {"type": "integer", "minimum": 1, "maximum": 10**9, "description": "Amount in cents"},
           "reason": {"type": "string", "maxLength": 500, "description": "Why (kept as the transfer's note)"}},
          ["child_id", "amount_cents"], run_fund_child, risk="dangerous", mutating=True),
    _tool("list_children", "List your children: id, name, state, funding, wallet.", {}, [], run_list_children,
          status_check=True),
    _tool("check_child_status", "Look at one child now: is its agent running, its state and credits, its last "
          "message to you.", {"child_id": CHILD_ID}, ["child_id"], run_check_child_status, status_check=True),
    _tool("message_child", "Send a signed message to one of your children over the social relay.",
          {"child_id": CHILD_ID, "content": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS,
                                             "description": "Message text"}},
          ["child_id", "content"], run_message_child, risk="caution", mutating=True),
    _tool("verify_child_constitution", "Check that a child's constitution is the same as yours (sha256).",
          {"child_id": CHILD_ID}, ["child_id"], run_verify_child_constitution),
    _tool("prune_dead_children", "Delete the sandboxes of dead children (and with them their wallets), keeping the "
          "newest few as they are.",
          {"keep_last": {"type": "integer", "minimum": 0, "maximum": 100, "description": "How many to keep (5)"}},
          [], run_prune_dead_children, risk="dangerous", mutating=True),
)
