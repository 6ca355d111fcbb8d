"""Self tools: view_soul, view_soul_history, update_soul, update_genesis_prompt; and modify_heartbeat.

Every version of the soul is kept in ``soul_history``, the replaced purpose in ``genesis_prompt_backup``. A turn from
outside cannot change the purpose, and with ``soulConfig.requireCreatorApprovalForPurposeChange`` only the creator
can.
"""

from __future__ import annotations

from typing import Any

from automaton_min.agent.prompts import GENESIS_LIMIT, SOUL_LIMIT
from automaton_min.agent.soul import LOW_ALIGNMENT, genesis_alignment, purpose_words, record_soul, soul_versions
from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.loop_control import change_config, need, object_schema, setting
from automaton_min.clock import HOUR_MS
from automaton_min.errors import AutomatonError
from automaton_min.fileio import atomic_write
from automaton_min.store.kv import delete_value, get_value, set_value

GENESIS_BACKUP_KEY = "genesis_prompt_backup"
REFLECTED_KEY = "soul_reflected_at"  # when reflect_on_soul last ran: the next update_soul within the hour is its result
REFLECTION_COUNTS_MS = HOUR_MS


def _read_soul(home: Any) -> str | None:
    try:
        return home.soul_path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ToolFailure(f"cannot read SOUL.md: {exc.strerror or exc}") from None


def run_view_soul(ctx: ToolContext, args: dict[str, Any]) -> str:
    soul = _read_soul(need(ctx, "home"))
    if soul is None:
        return "You have no SOUL.md yet; write one with update_soul."
    return soul if soul.strip() else "Your SOUL.md is empty; write it with update_soul."


def run_update_soul(ctx: ToolContext, args: dict[str, Any]) -> str:
    home = need(ctx, "home")
    content = args["content"]
    if not content.strip():
        raise ToolFailure("content: the new SOUL.md is empty; write who you are, not nothing")
    reason = (args.get("reason") or "").strip() or "no reason given"
    previous = _read_soul(home)
    if previous == content:
        return "SOUL.md already says exactly that; nothing changed."
    now_ms = ctx.now()
    reflected = get_value(ctx.db, REFLECTED_KEY)
    source = "reflection" if reflected and 0 <= now_ms - int(reflected) <= REFLECTION_COUNTS_MS else "agent"
    try:
        with ctx.db.transaction():  # the version is stored only if the file is written
            if previous is not None:
                record_soul(ctx.db, previous, "system", "the soul as it was before this change", now_ms)
            version = record_soul(ctx.db, content, source, reason, now_ms)
            delete_value(ctx.db, REFLECTED_KEY)  # one change per reflection
            atomic_write(home.soul_path, content.encode("utf-8"), 0o600)
    except OSError as exc:
        raise ToolFailure(f"SOUL.md was not changed: {exc.strerror or exc}") from None
    return f"SOUL.md updated to version {version} ({len(content)} characters; {reason}). Every version is kept."


def run_reflect_on_soul(ctx: ToolContext, args: dict[str, Any]) -> str:
    soul = _read_soul(need(ctx, "home")) or ""
    set_value(ctx.db, REFLECTED_KEY, str(ctx.now()), ctx.now())
    purpose = setting(ctx, "genesisPrompt") or ""
    alignment = genesis_alignment(soul, purpose)
    missing = sorted(purpose_words(purpose) - purpose_words(soul))[:12]
    lines = [f"Alignment of your SOUL.md with your purpose: {alignment:.2f} (0 to 1)."]
    if missing:
        lines.append("Words of your purpose your soul does not say: " + ", ".join(missing) + ".")
    versions = soul_versions(ctx.db, 1)
    if versions:
        lines.append(f"Your soul is at version {versions[0].version}, last changed {versions[0].created_at}.")
    lines.append("If your soul no longer says who you are or what you are for, rewrite it with update_soul."
                 if alignment < LOW_ALIGNMENT or missing else "Your soul and your purpose agree.")
    return "\n".join(lines)


def run_view_soul_history(ctx: ToolContext, args: dict[str, Any]) -> str:
    if args.get("version") is not None:
        found = next(iter(soul_versions(ctx.db, 1, int(args["version"]))), None)
        if found is None:
            raise ToolFailure(f"version: there is no version {args['version']} of your soul")
        return f"SOUL.md version {found.version} ({found.created_at}, {found.source}):\n{found.content}"
    versions = soul_versions(ctx.db)
    if not versions:
        return "Your soul has no recorded versions yet (the first update_soul records them)."
    return "\n".join(f"version {v.version}: {v.created_at}, by {v.source}, {len(v.content)} characters, "
                     f"sha256 {v.content_hash[:12]}: {v.reason or 'no reason given'}" for v in versions)


VIEW_SOUL = Tool(ToolSpec(
    "view_soul", "Read your SOUL.md: who you are, in your own words.",
    object_schema({}), "self_mod", risk="safe", status_check=True,
), run_view_soul)

VIEW_SOUL_HISTORY = Tool(ToolSpec(
    "view_soul_history", "List the versions of your SOUL.md (newest first), or read one of them.",
    object_schema({"version": {"type": "integer", "minimum": 1, "description": "The version to read"}}),
    "self_mod", risk="safe", status_check=True,
), run_view_soul_history)

REFLECT_ON_SOUL = Tool(ToolSpec(
    "reflect_on_soul", "Compare your SOUL.md with your purpose: how well they agree and what the soul leaves out.",
    object_schema({}), "self_mod", risk="safe", status_check=True,
), run_reflect_on_soul)

UPDATE_SOUL = Tool(ToolSpec(
    "update_soul",
    f"Rewrite your SOUL.md (the whole document, at most {SOUL_LIMIT} characters); every version is kept.",
    object_schema({
        "content": {"type": "string", "minLength": 1, "maxLength": SOUL_LIMIT,
                    "description": "The whole new SOUL.md (markdown)"},
        "reason": {"type": "string", "maxLength": 500, "description": "Why you are changing it"},
    }, ["content"]),
    "self_mod", risk="caution", mutating=True,
), run_update_soul)


def run_update_genesis_prompt(ctx: ToolContext, args: dict[str, Any]) -> str:
    need(ctx, "home")
    new_prompt, reason = args["new_prompt"].strip(), args["reason"].strip()
    if not new_prompt:
        raise ToolFailure("new_prompt: your purpose cannot be empty")
    if ctx.authority == "external":
        raise ToolFailure("your purpose is not changed at the request of others; only you or your creator can "
                          "change it")
    soul_config = setting(ctx, "soulConfig") or {}
    if soul_config.get("requireCreatorApprovalForPurposeChange") and ctx.authority != "creator":
        raise ToolFailure("changing your purpose needs your creator's approval "
                          "(soulConfig.requireCreatorApprovalForPurposeChange)")
    old = setting(ctx, "genesisPrompt") or ""
    if old == new_prompt:
        return "Your genesis prompt already says exactly that; nothing changed."
    now_ms = ctx.now()
    if old:
        set_value(ctx.db, GENESIS_BACKUP_KEY, old, now_ms)
    change_config(ctx, lambda layer: layer.__setitem__("genesisPrompt", new_prompt))
    backup = " The previous one is kept as a backup." if old else ""
    return f"Genesis prompt updated ({len(new_prompt)} characters; {reason}).{backup}"


UPDATE_GENESIS_PROMPT = Tool(ToolSpec(
    "update_genesis_prompt",
    f"Replace your genesis prompt, your core purpose (at most {GENESIS_LIMIT} characters). Needs a strong reason.",
    object_schema({
        "new_prompt": {"type": "string", "minLength": 1, "maxLength": GENESIS_LIMIT,
                       "description": "The new genesis prompt"},
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Why your purpose should change"},
    }, ["new_prompt", "reason"]),
    "self_mod", risk="dangerous", mutating=True,
), run_update_genesis_prompt)


def run_modify_heartbeat(ctx: ToolContext, args: dict[str, Any]) -> str:
    heartbeat = need(ctx, "heartbeat")
    try:
        return heartbeat.modify(args["action"], args["name"], schedule=args.get("schedule"), task=args.get("task"),
                                enabled=args.get("enabled"))
    except (AutomatonError, ValueError) as exc:
        raise ToolFailure(f"the heartbeat was not changed: {exc}") from None


MODIFY_HEARTBEAT = Tool(ToolSpec(
    "modify_heartbeat", "Add, update or remove an entry of your heartbeat schedule (tasks that run while you sleep).",
    object_schema({
        "action": {"type": "string", "enum": ["add", "update", "remove"], "description": "add, update or remove"},
        "name": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[A-Za-z0-9_.-]+$",
                 "description": "Entry name"},
        "schedule": {"type": "string", "maxLength": 100,
                     "description": "5-field cron expression, such as 0 9 * * MON (add/update)"},
        "task": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[A-Za-z0-9_.-]+$",
                 "description": "Task to run (add/update; default: the name)"},
        "enabled": {"type": "boolean", "description": "Enable or disable the entry"},
    }, ["action", "name"]),
    "self_mod", risk="caution", mutating=True,
), run_modify_heartbeat)


TOOLS = (VIEW_SOUL, VIEW_SOUL_HISTORY, REFLECT_ON_SOUL, UPDATE_SOUL, UPDATE_GENESIS_PROMPT, MODIFY_HEARTBEAT)
