"""Sandbox tools: exec, read_file, write_file, expose_port, remove_port, create_sandbox, list_sandboxes.

``exec`` and ``read_file`` return external content, which the loop sanitizes once. Without the policy engine,
``read_file`` refuses secret files (through a symlink too), and ``write_file`` stays inside the workspace (``/root``
in a Conway sandbox) and never overwrites the runtime's own files (SOUL.md has ``update_soul``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath
from typing import Any

from automaton_min.agent.tools.base import Tool, ToolContext, ToolFailure, ToolSpec
from automaton_min.agent.tools.jobs import STOP_JOB, start_background
from automaton_min.agent.tools.loop_control import need, object_schema
from automaton_min.confine.protected import HOME_SECRETS, is_key_name, is_secret_name
from automaton_min.conway.local import ExecResult
from automaton_min.errors import RuntimeFailure

REMOTE_HOME = "/root"
DEFAULT_EXEC_TIMEOUT_MS = 30_000
MAX_EXEC_TIMEOUT_MS = 600_000
MAX_COMMAND_CHARS = 20_000
MAX_PATH_CHARS = 4096
MAX_WRITE_CHARS = 1_000_000
MAX_READ_BYTES = 1 << 20  # local mode: bigger files are refused instead of loaded whole into memory

PROTECTED_NAMES = frozenset({"wallet.json", "automaton.json", "constitution.md", "state.db", "state.db-wal",
                             "state.db-shm"})
AUTOMATON_DIR = ".automaton"

PORT = {"type": "integer", "minimum": 1, "maximum": 65535, "description": "TCP port, 1-65535"}


def _is_secret(path: str, home: Any) -> bool:
    name = PurePosixPath(path).name
    if is_secret_name(name) or is_key_name(name):
        return True
    if name in HOME_SECRETS and PurePosixPath(path).parent.name == AUTOMATON_DIR:  # config.json: the API key
        return True
    return home is not None and Path(path) in (home.wallet_path, home.config_path, home.api_key_path)


def _same_file_as_secret(path: str, home: Any) -> bool:
    """``path`` is the wallet, the configuration or the API-key file under another name: a hard link, which no
    name or symlink check sees (and which path-based confinement lets through from inside the workspace)."""
    if home is None:
        return False
    for secret in (home.wallet_path, home.config_path, home.api_key_path):
        try:
            if os.path.samefile(path, secret):
                return True
        except OSError:  # missing, or not ours to stat: not that file
            continue
    return False


def _local_paths(sandbox: Any, path: str) -> tuple[str, str] | None:
    """For a local sandbox: the path as given (absolute) and with symlinks resolved."""
    resolve = getattr(sandbox, "resolve", None)
    if not getattr(sandbox, "is_local", False) or resolve is None:
        return None
    given = Path(os.path.normpath(resolve(path)))
    return str(given), os.path.realpath(given)


def _remote_path(path: str) -> str:
    """The absolute path in a Conway sandbox (``~`` and relative paths are in ``/root``)."""
    if path == "~" or path.startswith("~/"):
        path = REMOTE_HOME + path[1:]
    joined = path if path.startswith("/") else f"{REMOTE_HOME}/{path}"
    return os.path.normpath(joined).replace("//", "/")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def format_exec(result: ExecResult, timeout_s: float) -> str:
    """stdout, stderr, the exit code and whether the command was stopped or its output cut, compactly."""
    lines = [f"exit_code: {result.exit_code}"]
    if result.timed_out:
        lines.append(f"timed_out: true (stopped after {timeout_s:g} s with everything it started)")
    if result.truncated:
        lines.append("truncated: true (only the start of the output was kept)")
    lines.append("stdout:" + (("\n" + result.stdout.rstrip("\n")) if result.stdout else " (empty)"))
    lines.append("stderr:" + (("\n" + result.stderr.rstrip("\n")) if result.stderr else " (empty)"))
    return "\n".join(lines)


def exec_headline(text: str) -> str | None:
    """A ``format_exec`` result in one line: its exit code and the first line the command printed (stdout, else
    stderr); None for any other text."""
    lines = [part.strip() for part in text.splitlines() if part.strip()]
    if not lines or not lines[0].startswith("exit_code:"):
        return None
    printed = next((part for part in lines[1:] if part not in ("stdout:", "stderr:")
                    and not part.startswith(("stdout: (empty)", "stderr: (empty)", "timed_out:", "truncated:"))), None)
    return f"{lines[0]}, printed: {printed[:200]}" if printed else lines[0]


def disk_note(ctx: ToolContext) -> str:
    """After a command or a write in local mode: what the agent must know when the disk is full, else ''."""
    disk = ctx.services.disk
    note = disk.check() if disk is not None else None
    return f"\n{note}" if note else ""


def run_exec(ctx: ToolContext, args: dict[str, Any]) -> str:
    if args.get("background"):
        return start_background(ctx, args["command"]) + disk_note(ctx)
    sandbox = need(ctx, "sandbox")
    timeout_s = int(args.get("timeout", DEFAULT_EXEC_TIMEOUT_MS)) / 1000
    try:
        result = sandbox.exec(args["command"], timeout_s)
    except RuntimeFailure as exc:
        unanswered = getattr(exc, "status", 0) is None  # no answer from a remote sandbox: it may have run
        raise ToolFailure(f"exec failed: {exc}" + ("; the command may or may not have run" if unanswered else "")
                          + disk_note(ctx)) from None
    except OSError as exc:
        raise ToolFailure(f"the command could not be started: {exc.strerror or exc}{disk_note(ctx)}") from None
    return format_exec(result, timeout_s) + disk_note(ctx)


EXEC = Tool(ToolSpec(
    "exec",
    "Run a shell command in your sandbox (/bin/sh -c, in your home directory). Returns exit code, stdout and stderr. "
    "Everything it starts ends with the call unless background is true.",
    object_schema({
        "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS,
                    "description": "The shell command"},
        "timeout": {"type": "integer", "minimum": 1000, "maximum": MAX_EXEC_TIMEOUT_MS,
                    "description": f"Milliseconds before the command is stopped (default {DEFAULT_EXEC_TIMEOUT_MS})"},
        "background": {"type": "boolean",
                       "description": "Keep it running after this call (a server); stop it with stop_job"},
    }, ["command"]),
    "vm", risk="caution", mutating=True,
), run_exec)


def run_read_file(ctx: ToolContext, args: dict[str, Any]) -> str:
    sandbox = need(ctx, "sandbox")
    path = args["path"]
    home = ctx.services.home
    local = _local_paths(sandbox, path)
    candidates = [path] + (list(local) if local else [_remote_path(path)])
    if any(_is_secret(p, home) for p in candidates) or (local and _same_file_as_secret(local[1], home)):
        raise ToolFailure(f"{path} holds secrets (wallet, configuration, API key or keys) "
                          "and is never read into your context")
    if local and not getattr(sandbox, "confined", False):  # confined: the spawner looks, not this process
        try:
            size = os.path.getsize(local[1])
        except FileNotFoundError:
            raise ToolFailure(f"no such file: {path}") from None
        except OSError as exc:
            raise ToolFailure(f"cannot read {path}: {exc.strerror or exc}") from None
        if os.path.isdir(local[1]):
            raise ToolFailure(f"{path} is a directory; list it with exec (ls -la)")
        if not os.path.isfile(local[1]):  # a device or a pipe: /dev/zero never ends, a FIFO may never answer
            raise ToolFailure(f"{path} is not a regular file; read_file reads regular files only")
        if size > MAX_READ_BYTES:
            raise ToolFailure(f"{path} is {size} bytes; read_file reads files up to {MAX_READ_BYTES} bytes. "
                              "Use exec with head, tail, sed -n or grep to read part of it")
    try:
        text = sandbox.read_file(path)
    except FileNotFoundError:
        raise ToolFailure(f"no such file: {path}") from None
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise ToolFailure(f"{path} is larger than {MAX_READ_BYTES} bytes, the most read_file reads. "
                              "Use exec with head, tail, sed -n or grep to read part of it") from None
        if exc.errno == errno.EINVAL:
            raise ToolFailure(f"{path} is not a regular file (a directory, device or pipe); read_file reads regular "
                              "files only: list a directory with exec (ls -la)") from None
        raise ToolFailure(f"cannot read {path}: {exc.strerror or exc}") from None
    except RuntimeFailure as exc:
        raise ToolFailure(f"cannot read {path}: {exc}") from None
    return text if text else f"({path} is empty)"


READ_FILE = Tool(ToolSpec(
    "read_file",
    "Read a text file in your sandbox (relative paths and ~ are in your home directory).",
    object_schema({"path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS, "description": "File path"}},
                  ["path"]),
    "vm", risk="safe",
), run_read_file)


def run_write_file(ctx: ToolContext, args: dict[str, Any]) -> str:
    sandbox = need(ctx, "sandbox")
    path, content = args["path"], args["content"]
    home = ctx.services.home
    local = _local_paths(sandbox, path)
    if local:
        workspace = os.path.realpath(sandbox.workspace)
        target = os.path.join(os.path.realpath(os.path.dirname(local[0])), os.path.basename(local[0]))
        if not _inside(target, workspace):
            raise ToolFailure(f"{path} is outside your workspace {workspace}; files are written only inside it")
        shown, checks = local[0], [local[0], target, local[1]]
    else:
        shown = _remote_path(path)
        if not _inside(shown, REMOTE_HOME):
            raise ToolFailure(f"{path} is outside {REMOTE_HOME}; files are written only inside it")
        checks = [shown]
    for candidate in checks:
        name = PurePosixPath(candidate).name
        if name == "SOUL.md":
            raise ToolFailure("SOUL.md is changed with update_soul, which keeps the previous version")
        if name in PROTECTED_NAMES or _is_secret(candidate, home) or _same_file_as_secret(candidate, home):
            raise ToolFailure(f"{path} is one of your runtime's own files (wallet, configuration, database or "
                              "constitution); it is never overwritten")
    try:
        sandbox.write_file(path, content)
    except OSError as exc:
        raise ToolFailure(f"cannot write {path}: {exc.strerror or exc}{disk_note(ctx)}") from None
    except RuntimeFailure as exc:
        raise ToolFailure(f"cannot write {path}: {exc}{disk_note(ctx)}") from None
    return f"File written: {shown} ({len(content.encode('utf-8'))} bytes)" + disk_note(ctx)


WRITE_FILE = Tool(ToolSpec(
    "write_file",
    "Write a text file in your sandbox, replacing it (parent directories are created).",
    object_schema({
        "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS, "description": "File path"},
        "content": {"type": "string", "maxLength": MAX_WRITE_CHARS, "description": "The whole new content"},
    }, ["path", "content"]),
    "vm", risk="caution", mutating=True,
), run_write_file)


def run_expose_port(ctx: ToolContext, args: dict[str, Any]) -> str:
    sandbox = need(ctx, "sandbox")
    try:
        info = sandbox.expose_port(args["port"])
    except RuntimeFailure as exc:
        raise ToolFailure(f"port {args['port']} was not exposed: {exc}") from None
    note = (" (local mode: reachable from this machine only, not from the internet)"
            if getattr(sandbox, "is_local", False) else "")
    return f"Port {info.port} exposed at: {info.public_url}{note}"


def run_remove_port(ctx: ToolContext, args: dict[str, Any]) -> str:
    sandbox = need(ctx, "sandbox")
    try:
        sandbox.remove_port(args["port"])
    except RuntimeFailure as exc:
        raise ToolFailure(f"port {args['port']} was not removed: {exc}") from None
    return f"Port {args['port']} removed"


EXPOSE_PORT = Tool(ToolSpec(
    "expose_port", "Expose a port of your sandbox to the internet; returns its public URL.",
    object_schema({"port": PORT}, ["port"]), "vm", risk="caution", mutating=True,
), run_expose_port)

REMOVE_PORT = Tool(ToolSpec(
    "remove_port", "Stop exposing a port of your sandbox.",
    object_schema({"port": PORT}, ["port"]), "vm", risk="caution", mutating=True,
), run_remove_port)


def run_create_sandbox(ctx: ToolContext, args: dict[str, Any]) -> str:
    conway = need(ctx, "conway")
    name = args.get("name") or f"sandbox-{ctx.now()}"
    try:
        info = conway.create_sandbox(name, args.get("vcpu", 1), args.get("memory_mb", 512), args.get("disk_gb", 5),
                                     args.get("region"))
    except RuntimeFailure as exc:
        raise ToolFailure(f"no sandbox was created: {exc}") from None
    where = f" in {info.region}" if info.region else ""
    return (f"Sandbox created: {info.id} [{info.status}] {info.vcpu} vCPU, {info.memory_mb} MB RAM, "
            f"{info.disk_gb} GB disk{where}")


def run_list_sandboxes(ctx: ToolContext, args: dict[str, Any]) -> str:
    conway = need(ctx, "conway")
    try:
        sandboxes = conway.list_sandboxes()
    except RuntimeFailure as exc:
        raise ToolFailure(f"cannot list sandboxes: {exc}") from None
    if not sandboxes:
        return "No sandboxes."
    return "\n".join(f"{s.id} [{s.status}] {s.vcpu}vCPU/{s.memory_mb}MB {s.region}".rstrip() for s in sandboxes)


CREATE_SANDBOX = Tool(ToolSpec(
    "create_sandbox",
    "Create a new Conway sandbox (a separate VM, paid from your credits).",
    object_schema({
        "name": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                 "description": "Sandbox name"},
        "vcpu": {"type": "integer", "minimum": 1, "maximum": 16, "description": "vCPUs (default 1)"},
        "memory_mb": {"type": "integer", "minimum": 256, "maximum": 65536, "description": "Memory in MB (default 512)"},
        "disk_gb": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Disk in GB (default 5)"},
        "region": {"type": "string", "minLength": 1, "maxLength": 64, "description": "Region (optional)"},
    }),
    "conway", risk="caution", mutating=True,
), run_create_sandbox)

LIST_SANDBOXES = Tool(ToolSpec(
    "list_sandboxes", "List your Conway sandboxes.", object_schema({}), "conway", risk="safe", status_check=True,
), run_list_sandboxes)


TOOLS = (EXEC, STOP_JOB, READ_FILE, WRITE_FILE, EXPOSE_PORT, REMOVE_PORT, CREATE_SANDBOX, LIST_SANDBOXES)
