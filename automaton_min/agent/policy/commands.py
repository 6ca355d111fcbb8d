"""What an ``exec`` command would do to the agent, judged after undoing its disguises.

**Denied** (``FORBIDDEN_COMMAND``), however the command is spelled:

- reading a secret: any mention of ``wallet.json`` or ``automaton.json``, of the
  home's ``config.json`` (the API key), of ``.env`` files, of credential
  directories (``.ssh``, ``.gnupg``, ``.aws``, ...), ``/etc/shadow`` or a
  process's ``/proc/<pid>/environ``; and copying, archiving, searching or sending
  the home directory as a whole (``tar``, ``cp -r``, ``grep -r``, ``curl`` ...);
- changing or deleting the runtime's files: ``state.db`` and its WAL/SHM, the
  wallet, the configuration, the API key file, ``constitution.md``, ``SOUL.md``
  (``update_soul`` changes it), the heartbeat file, the policy engine's code, the
  credential and system directories; or deleting the home or a directory that
  contains it (``rm -rf ~/.automaton``, ``rm -rf /``) - whether by ``rm``, ``mv``,
  ``cp``/``ln``/``install`` onto them, ``dd of=``, ``>``/``>>``, ``tee``,
  ``sed -i``, ``chmod``/``chown``, ``truncate``, ``find -delete``/``-exec rm``,
  ``xargs rm``, or inline interpreter code (``python -c``, ``perl -e`` ...) that
  names them;
- SQL that destroys the agent's tables (``DROP TABLE``, ``TRUNCATE TABLE``,
  ``DELETE FROM turns|kv|identity|...``) or rewrites its ledgers
  (``UPDATE policy_decisions|spend_tracking|payment_intents``);
- stopping the agent: ``kill``/``pkill``/``killall``/``systemctl stop|disable|
  kill|mask|restart``/``service ... stop`` naming the automaton, ``kill -1``,
  ``kill $PPID``, killing every Python process, ``shutdown``/``poweroff``/``halt``.

**Denied** (``OBFUSCATED_COMMAND``): running what was decoded - ``base64 -d``,
``xxd -r``, ``openssl ... -d``, ``uudecode``, ``rev``, ``printf``/``echo`` with
numeric escapes, inline code that decodes and executes - piped into a shell or
interpreter, ``xargs``, ``eval`` or ``source``, or used inside ``$(...)``,
backticks or ``<(...)``; and nesting deeper than this reader follows.

How disguises are undone: quotes and backslashes are removed within words;
``$HOME``, ``${HOME}``, ``~`` (the commands' HOME, which is the workspace in local
mode, and this process's home), ``${IFS}`` and variables assigned earlier are
expanded; ``$(echo ..)``/``$(printf ..)`` are evaluated; ``sh -c``, ``bash -c``,
``eval``, ``su -c``, heredocs fed to a shell, ``$(...)`` and backticks are read
as commands in their own right, and so is a script the same command writes with
``echo``/``printf``/``cat <<EOF`` and then runs (``sh x.sh``, ``./x.sh``,
``python3 x.py``, ``. x.sh``); ``IFS`` changes are honoured; ``\\xNN``/octal escapes, ``%NN`` URL escapes and
base64 or hex literals are decoded and read again. Every path is resolved against
the workspace (and directories the command ``cd``s into) with ``..`` collapsed and
symlinks followed; relative paths with a directory part are also tried from the
workspace's parents (``cd`` into a place this reader cannot follow, then
``cat automaton-home/config.json``); globs are matched against the
protected names and expanded on the local disk.

**Allowed**: everything else - ordinary work such as ``ls``, ``git status``,
``python script.py``, ``cat notes.txt``, ``rm -rf build/``, ``pip install``,
``curl ... | sh``, ``sqlite3 other.db``, reading ``SOUL.md`` or listing the home.
False positives cripple the agent, so nothing is denied for merely looking risky.

This is a speed bump, not a sandbox: a program the agent writes and then runs can
still do anything the agent's user may. Real confinement comes from the sandbox
(or a separate OS user for the runtime's files).
"""

from __future__ import annotations

import base64
import binascii
import glob
import itertools
import os
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from automaton_min.agent.policy.paths import (
    BLOCKED,
    BLOCKED_READ,
    CODE,
    HOME,
    SECRET,
    SELF,
    STATE,
    Protection,
)
from automaton_min.agent.policy.shell import (
    WRITE_REDIRECTS,
    Command,
    Expander,
    Pipeline,
    Word,
    codec_decode,
    decode_escapes,
    echo_output,
    has_escape_codes,
    is_assignment,
    parse,
    printf_output,
    spells_text,
)

FORBIDDEN_COMMAND = "FORBIDDEN_COMMAND"
OBFUSCATED_COMMAND = "OBFUSCATED_COMMAND"

MAX_DEPTH = 6
MAX_COMMAND_CHARS = 100_000
MAX_GLOB_MATCHES = 256
MAX_CWDS = 8
MAX_PIECES = 2000

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox", "rbash", "csh", "tcsh"})
INTERPRETERS = frozenset({"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "deno",
                          "bun", "php", "lua", "luajit", "Rscript", "awk", "gawk", "mawk", "nawk", "tclsh", "osascript"})
EXECUTORS = SHELLS | INTERPRETERS | {"xargs", "eval", "source", ".", "exec", "env", "sudo", "parallel"}
WRAPPERS = {  # command runners whose own options come first; the value is how many arguments follow them
    "sudo": 0, "doas": 0, "env": 0, "nohup": 0, "nice": 0, "ionice": 0, "time": 0, "command": 0, "builtin": 0,
    "exec": 0, "stdbuf": 0, "setsid": 0, "unbuffer": 0, "chrt": 1, "taskset": 1, "timeout": 1, "flock": 1,
    "watch": 0, "chroot": 1, "runuser": 0, "catchsegv": 0, "strace": 0, "ltrace": 0, "faketime": 1,
}
_WRAPPER_OPTIONS_WITH_VALUE = {
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"},
    "env": {"-u", "-C", "-S", "--unset", "--chdir"},
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "-n", "-p", "-P", "-u"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "stdbuf": {"-i", "-o", "-e"},
    "runuser": {"-u", "-g", "-G"},
    "watch": {"-n", "-d", "--interval"},
}
KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac",
                      "in", "function", "select", "coproc", "[[", "]]"})
DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "wipe", "truncate"})
CHANGERS = frozenset({"chmod", "chown", "chgrp", "chattr", "setfacl", "touch"})
COPIERS = frozenset({"cp", "install", "ln", "rsync", "scp", "link"})
BULK_READERS = frozenset({"cp", "rsync", "scp", "sftp", "tar", "zip", "7z", "7za", "cpio", "pax", "rar", "gzip", "bzip2",
                          "xz", "zstd", "grep", "egrep", "fgrep", "rg", "ag", "ack", "curl", "wget", "nc", "ncat",
                          "netcat", "socat", "base64", "xxd", "od", "hexdump", "strings", "cat", "rclone",
                          "aws", "gsutil"})
CODE_MARKERS = ("automaton_min/agent/policy", "agent/injection", "policy-engine", "policy-rules", "policy_engine",
                "policy_rules", "injection-defense", "injection_defense", "self-mod/code", "audit-log")
_AGENT_TABLES = ("turns", "identity", "kv", "schema_version", "skills", "children", "registry", "policy_decisions",
                 "spend_tracking", "payment_intents", "inference_costs", "transactions", "tool_calls",
                 "inbox_messages", "soul_history", "model_registry", "heartbeat_schedule")
_LEDGERS = ("policy_decisions", "spend_tracking", "payment_intents", "schema_version")
_Q = r"[\"'`\[]?"
SQL_PATTERNS = (
    (re.compile(r"\bDROP\s+TABLE\b", re.I), "drops a database table"),
    (re.compile(r"\bTRUNCATE\s+TABLE\b", re.I), "truncates a database table"),
    (re.compile(rf"\bDELETE\s+FROM\s+(main\.)?{_Q}({'|'.join(_AGENT_TABLES)})\b", re.I), "deletes the agent's own records"),
    (re.compile(rf"\bUPDATE\s+(OR\s+\w+\s+)?(main\.)?{_Q}({'|'.join(_LEDGERS)})\b", re.I), "rewrites the agent's ledgers"),
)
MENTION_PATTERNS = (
    (re.compile(r"wallet\.json", re.I), "names the wallet (wallet.json)"),
    (re.compile(r"automaton\.json", re.I), "names the configuration, which may hold API keys (automaton.json)"),
    (re.compile(r"(?:^|[^\w.-])\.(?:ssh|gnupg|gpg|aws|azure|gcloud|kube|docker)(?:[/\s'\"`;|&)]|$)"),
     "names a credential directory"),
    (re.compile(r"/etc/g?shadow\b"), "names the password hashes (/etc/shadow)"),
    (re.compile(r"/proc/[^/\s]+/(?:environ|mem)\b"), "reads another process's environment or memory"),
    (re.compile(r"(?:^|[\s/=<>'\"`;|&(])\.env(?:\.(?!example\b|sample\b|template\b|dist\b)[\w.-]+)?(?=$|[\s'\"`;|&)<>])"),
     "names a .env file"),
    (re.compile(r"\bid_(?:rsa|dsa|ecdsa|ed25519)\b"), "names an SSH private key"),
)
_STOP_WORDS = re.compile(r"\b(stop|disable|kill|mask|restart|reload-or-restart|try-restart|isolate)\b")
_PYTHON_NAME = re.compile(r"python[\d.]*")
_NAMES_SELF = re.compile(r"(?<!\.)automaton", re.I)  # the program or its service, not a path in the ~/.automaton home
_INLINE_DECODE = re.compile(r"b64decode|b32decode|fromhex|unhexlify|decode\(\s*['\"](?:hex|rot13|base64)|rot_?13|\\x[0-9a-f]{2}", re.I)
_INLINE_RUN = re.compile(r"\bexec\s*\(|\beval\s*\(|\bsystem\s*\(|subprocess|popen|\bspawn|`|\bremove\s*\(|\bunlink|rmtree", re.I)
_BASE64_LITERAL = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{8,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX_LITERAL = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){4,}(?![0-9A-Fa-f])")


@dataclass(frozen=True)
class Finding:
    code: str
    message: str


class _Denied(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


@dataclass
class Analysis:
    """The verdict on a command, and every path it would write (with its protection tags)."""

    finding: Finding | None
    writes: list[tuple[str, frozenset[str]]] = field(default_factory=list)


@dataclass
class _Scope:
    env: dict[str, list[str]]
    cwds: list[str]
    in_substitution: bool = False
    files: dict[str, str] = field(default_factory=dict)  # what this command wrote into files, to read if it runs them


def _deny(message: str, code: str = FORBIDDEN_COMMAND) -> None:
    raise _Denied(Finding(code, message))


def _describe(tags: frozenset[str]) -> str:
    if SECRET in tags:
        return "a file that holds a key"
    if STATE in tags:
        return "the runtime's own files (wallet, configuration, database, constitution)"
    if SELF in tags:
        return "SOUL.md or the heartbeat configuration (use update_soul / modify_heartbeat)"
    if CODE in tags:
        return "the policy engine's code"
    if HOME in tags:
        return "the automaton's home directory (or a directory containing it)"
    return "a protected system or credential directory"


class CommandJudge:
    """Judges ``exec`` commands for one home and workspace (see the module docstring for what is denied)."""

    def __init__(self, protection: Protection) -> None:
        self.p = protection
        self.writes: list[tuple[str, frozenset[str]]] = []
        ancestors, current = [], os.path.dirname(protection.workspace)
        while current and current not in ancestors:
            ancestors.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        self.ancestors = ancestors

    def analyze(self, command: str) -> Analysis:
        self.writes = []
        if len(command) > MAX_COMMAND_CHARS:
            return Analysis(Finding(FORBIDDEN_COMMAND, f"the command is longer than {MAX_COMMAND_CHARS} characters, too long to check"))
        scope = _Scope({}, [self.p.workspace])
        try:
            self._text(command, 0, scope)
        except _Denied as denied:
            return Analysis(denied.finding, self.writes)
        return Analysis(None, self.writes)

    # ------------------------------------------------------------------ text level

    def _text(self, text: str, depth: int, scope: _Scope) -> None:
        if depth > MAX_DEPTH:
            _deny("the command nests commands deeper than can be checked", OBFUSCATED_COMMAND)
        self._mentions(text)
        self._mentions(re.sub(r"[\\'\"]", "", text))
        for pattern, what in SQL_PATTERNS:
            if pattern.search(text) or pattern.search(re.sub(r"[\\'\"]", "", text)):
                _deny(f"the command {what}")
        for pipeline in parse(text):
            self._pipeline(pipeline, depth, scope)
        for view in self._decoded_views(text):
            self._text(view, depth + 1, _Scope(dict(scope.env), list(scope.cwds), scope.in_substitution, scope.files))

    def _mentions(self, text: str) -> None:
        for pattern, what in MENTION_PATTERNS:
            if pattern.search(text):
                _deny(f"the command {what}")

    def _decoded_views(self, text: str) -> list[str]:
        """The text with numeric escapes, URL escapes, and base64 or hex literals decoded (when they change it)."""
        views = []
        if has_escape_codes(text):
            views.append(decode_escapes(text))
        if re.search(r"%[0-9A-Fa-f]{2}", text):
            views.append(unquote(text))
        for literal in _BASE64_LITERAL.findall(text):
            padded = literal + "=" * (-len(literal) % 4)
            for decoder in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    decoded = codec_decode(decoder(padded.encode()))
                except (binascii.Error, ValueError):
                    continue
                if decoded:
                    views.append(decoded)
                    break
        for literal in _HEX_LITERAL.findall(text):
            decoded = codec_decode(bytes.fromhex(literal))
            if decoded:
                views.append(decoded)
        return [v for v in dict.fromkeys(views) if v != text]

    # ------------------------------------------------------------------ pipelines and commands

    def _pipeline(self, pipeline: Pipeline, depth: int, scope: _Scope) -> None:
        decoded_upstream = False
        upstream_paths: list[str] = []
        for command in pipeline:
            argv, expander = self._prepare(command, depth, scope)
            verb, args = _unwrap(argv)
            decoder = verb is not None and _is_decoder(verb, args)
            if decoder and scope.in_substitution:
                _deny("the command builds its arguments from decoded data", OBFUSCATED_COMMAND)
            if verb is not None and decoded_upstream and (verb in EXECUTORS or _basename(verb) in EXECUTORS):
                _deny(f"the command decodes data and runs it with {verb}", OBFUSCATED_COMMAND)
            self._command(command, verb, args, expander, depth, scope, upstream_paths)
            decoded_upstream = decoded_upstream or decoder
            upstream_paths += [a for a in args if not a.startswith("-")]

    def _prepare(self, command: Command, depth: int, scope: _Scope) -> tuple[list[str], Expander]:
        """Record assignments, expand the words; returns the argv and the expander used."""
        expander = Expander(scope.env, self.p.tildes, lambda inner: self._substitute(inner, depth, scope))
        argv: list[str] = []
        leading = True
        for word in command.words:
            if leading and is_assignment(word):
                self._assign(word, expander, scope)
                continue
            leading = False
            for fields in expander.fields(word):
                argv += fields
        for _op, target in command.redirects:
            for sub in target.substitutions():
                self._substitute(sub, depth, scope)
        return argv, expander

    def _assign(self, word: Word, expander: Expander, scope: _Scope) -> None:
        for value in expander.word(word):
            name, _, rest = value.partition("=")
            name = name.rstrip("+")
            values = [t + rest[1:] for t in self.p.tildes] if rest == "~" or rest.startswith("~/") else [rest]
            scope.env[name] = list(dict.fromkeys(scope.env.get(name, []) + values if name in scope.env else values))[:8]

    def _substitute(self, inner: str, depth: int, scope: _Scope) -> list[str]:
        """Judge ``$(inner)`` as a command, and return what it prints when that is knowable (echo, printf)."""
        sub_scope = _Scope(scope.env, scope.cwds, True, scope.files)
        self._text(inner, depth + 1, sub_scope)
        pipelines = parse(inner)
        if len(pipelines) != 1 or len(pipelines[0]) != 1:
            return []
        command = pipelines[0][0]
        expander = Expander(scope.env, self.p.tildes, lambda text: self._substitute(text, depth + 1, sub_scope))
        argv = [f for w in command.words for alt in expander.fields(w) for f in alt]
        verb, args = _unwrap(argv)
        if verb == "echo":
            return echo_output(args)
        if verb == "printf":
            return [printf_output(args)]
        if verb == "cat" and not args:
            return [w.heredoc for _, w in command.redirects if w.heredoc is not None]
        return []

    def _command(self, command: Command, verb: str | None, args: list[str], expander: Expander, depth: int,
                 scope: _Scope, upstream_paths: list[str]) -> None:
        redirect_targets = []
        for op, target in command.redirects:
            values = [v for alt in expander.fields(target) for v in alt]
            if op in WRITE_REDIRECTS and not all(re.fullmatch(r"\d+|-", v) for v in values):
                redirect_targets += values
            elif op in ("<", "<>", "<&"):
                self._reads(values, scope)
        if verb is None:
            self._writes(redirect_targets, scope, deleting=False)
            return
        name = _basename(verb)
        heredoc = next((w.heredoc for op, w in command.redirects if op in ("<<", "<<-") and w.heredoc is not None), None)
        self._remember_written(name, args, heredoc, redirect_targets, scope)
        if heredoc is not None and name not in SHELLS | INTERPRETERS | {"sqlite3"}:
            heredoc = None  # data for a file, not code
        self._reads([verb, *args], scope)
        self._writes(redirect_targets, scope, deleting=False)
        if "/" in verb:
            script = self._written_text(verb, scope)
            if script is not None:
                self._text(script, depth + 1, scope)
        self._argv(name, args, depth, scope, heredoc, upstream_paths, command)

    def _remember_written(self, name: str, args: list[str], heredoc: str | None, targets: list[str], scope: _Scope) -> None:
        """Keep what ``echo``/``printf``/``cat <<EOF`` put into files, in case the command runs them later."""
        if name == "echo":
            text = "\n".join(echo_output(args))
        elif name == "printf":
            text = printf_output(args)
        elif name in ("cat", "tee") and heredoc is not None:
            text = heredoc
        else:
            return
        for target in targets + (_operands(args) if name == "tee" else []):
            for base in scope.cwds:
                for canon in self.p.canonical(target, base) if _path_like(target) else ():
                    scope.files[canon] = (scope.files.get(canon, "") + "\n" + text)[-MAX_COMMAND_CHARS:]

    def _written_text(self, path: str, scope: _Scope) -> str | None:
        if not scope.files or not _path_like(path):
            return None
        texts = [scope.files[c] for base in scope.cwds for c in self.p.canonical(path, base) if c in scope.files]
        return "\n".join(texts) if texts else None

    def _argv(self, name: str, args: list[str], depth: int, scope: _Scope, heredoc: str | None,
              upstream_paths: list[str], command: Command | None = None) -> None:
        """Checks that depend on what the command is."""
        operands = _operands(args)
        if name in ("cd", "pushd"):
            self._cd(operands[:1], scope)
        elif name == "for" and len(args) >= 2 and args[1] == "in":
            scope.env[args[0]] = args[2:10] or [""]
        elif name in ("export", "declare", "local", "readonly", "typeset"):
            for arg in args:
                if "=" in arg and re.match(r"[A-Za-z_]\w*=", arg):
                    key, _, value = arg.partition("=")
                    scope.env[key] = [value]
        if name in DELETERS:
            self._writes(operands, scope, deleting=True)
        elif name == "mv":
            self._writes(operands, scope, deleting=True)
        elif name in COPIERS:
            self._writes(_copy_targets(args), scope, deleting=False)
        elif name == "dd":
            self._writes([a[3:] for a in args if a.startswith("of=")], scope, deleting=False)
        elif name == "tee":
            self._writes(operands, scope, deleting=False)
        elif name in ("sed", "perl") and any(a.startswith("-i") or a == "--in-place" or a.startswith("--in-place=") or
                                              (a.startswith("-") and not a.startswith("--") and "i" in a[1:]) for a in args):
            self._writes(operands, scope, deleting=False)
        elif name in CHANGERS:
            self._writes(operands, scope, deleting=False)
        if name in BULK_READERS:
            self._bulk(args, scope)
        if name == "find":
            self._find(args, depth, scope)
        elif name == "xargs":
            inner = _xargs_command(args)
            if inner:
                inner_name = _basename(inner[0])
                if inner_name in DELETERS | {"mv"} | CHANGERS:
                    self._writes(upstream_paths, scope, deleting=True)
                self._argv(inner_name, inner[1:], depth, scope, None, upstream_paths)
        elif name in SHELLS or name in ("source", "."):
            code = _dash_c(args) if name in SHELLS else None
            script = self._written_text(operands[0], scope) if operands and code is None else None
            for text in (code, script, heredoc if code is None else None):
                if text is not None:
                    self._text(text, depth + 1, scope)
        elif name in ("eval", "su", "runuser"):
            code = _dash_c(args) if name in ("su", "runuser") else " ".join(args)
            if code:
                self._text(code, depth + 1, scope)
        elif name in INTERPRETERS or _PYTHON_NAME.fullmatch(name):
            script = self._written_text(operands[0], scope) if operands else None
            self._inline_code(name, args, heredoc if script is None else f"{heredoc or ''}\n{script}", scope)
        elif name == "sqlite3" and heredoc is not None:
            for pattern, what in SQL_PATTERNS:
                if pattern.search(heredoc):
                    _deny(f"the command {what}")
        self._stopping(name, args, command)

    # ------------------------------------------------------------------ paths

    def _tags(self, piece: str, scope: _Scope) -> frozenset[str]:
        """Protection tags of everything ``piece`` may name, as a path."""
        if not _path_like(piece):
            return frozenset()
        found: set[str] = set()
        bases = scope.cwds
        if any(c in piece for c in "*?["):
            directory, pattern = os.path.split(piece)
            for base in bases:
                for canon_dir in self.p.canonical(directory or ".", base):
                    found |= self.p.glob_tags(canon_dir, pattern)
                    pattern_path = os.path.join(canon_dir, pattern)
                    for match in itertools.islice(glob.iglob(pattern_path), MAX_GLOB_MATCHES):
                        found |= self.p.tags(os.path.realpath(match))
            return frozenset(found)
        for base in bases:
            for canon in self.p.canonical(piece, base):
                found |= self.p.tags(canon)
        if "/" in piece and not piece.startswith(("/", "~")):
            for base in self.ancestors:
                for canon in self.p.canonical(piece, base):
                    rel = self.p.home_relative(canon)
                    if rel or any(os.path.commonpath([canon, d]) == d for d in self.p.code_dirs):
                        found |= self.p.tags(canon) - {HOME}
        return frozenset(found)

    def _pieces(self, value: str) -> list[str]:
        """The value and the path-like pieces inside it (``--out=/x``, ``host:/x``, code such as ``open('/x')``)."""
        pieces = [value] + [p for p in re.split(r"[=:,()\s'\"`;|&<>{}@]+", value) if p and p != value]
        return list(dict.fromkeys(pieces))[:MAX_PIECES]

    def _reads(self, values: list[str], scope: _Scope) -> None:
        for value in values:
            for piece in self._pieces(value):
                tags = self._tags(piece, scope)
                if tags & {SECRET, BLOCKED_READ}:
                    _deny(f"the command reads {_describe(tags & {SECRET, BLOCKED_READ} or tags)} ({piece})")

    def _writes(self, targets: list[str], scope: _Scope, *, deleting: bool) -> None:
        for target in targets:
            for piece in self._pieces(target):
                tags = self._tags(piece, scope)
                if any(marker in piece for marker in CODE_MARKERS):
                    tags |= {CODE}
                if tags:
                    self.writes.append((piece, tags))
                bad = tags & {STATE, SELF, CODE, BLOCKED, SECRET}
                if deleting and HOME in tags:
                    bad |= {HOME}
                if bad:
                    verb = "deletes or moves" if deleting else "writes"
                    _deny(f"the command {verb} {_describe(frozenset(bad))} ({piece})")

    def _bulk(self, args: list[str], scope: _Scope) -> None:
        """Copying, archiving, searching or sending the home directory as a whole reads the wallet with it."""
        for arg in _operands(args):
            for piece in self._pieces(arg):
                if not _path_like(piece):
                    continue
                for base in scope.cwds:
                    if any(self.p.home_relative(c) == "" for c in self.p.canonical(piece, base)):
                        _deny(f"the command reads the whole automaton home, wallet included ({piece})")

    def _cd(self, operands: list[str], scope: _Scope) -> None:
        targets = operands or ["~"]
        if targets[0] == "-":
            return
        added = []
        for base in scope.cwds:
            added += self.p.canonical(targets[0], base)
        scope.cwds[:] = list(dict.fromkeys(scope.cwds + added))[:MAX_CWDS]

    def _find(self, args: list[str], depth: int, scope: _Scope) -> None:
        roots = []
        for arg in args:
            if arg.startswith(("-", "(", "!")):
                break
            roots.append(arg)
        roots = roots or ["."]
        if "-delete" in args:
            self._writes(roots, scope, deleting=True)
        for i, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir"):
                inner = []
                for item in args[i + 1:]:
                    if item in (";", "+", "\\;"):
                        break
                    inner.append(item)
                if inner:
                    expanded = [r for item in inner for r in (roots if item == "{}" else [item])]
                    self._reads(expanded, scope)
                    self._argv(_basename(expanded[0]), expanded[1:], depth, scope, None, roots)

    def _inline_code(self, name: str, args: list[str], heredoc: str | None, scope: _Scope) -> None:
        code_parts = []
        for i, arg in enumerate(args):
            if arg in ("-c", "-e", "-E", "--eval", "-r", "-p", "--command") and i + 1 < len(args):
                code_parts.append(args[i + 1])
        if name in ("awk", "gawk", "mawk", "nawk") and args:
            code_parts += [a for a in args if not a.startswith("-")][:1]
        if heredoc is not None:
            code_parts.append(heredoc)
        for code in code_parts:
            if _INLINE_DECODE.search(code) and _INLINE_RUN.search(code):
                _deny("the command's inline code decodes data and runs it", OBFUSCATED_COMMAND)
            self._mentions(code)
            lowered = code.lower()
            if any(marker in code for marker in CODE_MARKERS):
                _deny("the command's inline code touches the policy engine's code")
            for piece in self._pieces(code):
                tags = self._tags(piece, scope)
                if tags & {STATE, SELF, SECRET, CODE} or self.p.home_relative(piece) == "" and piece.startswith("/"):
                    _deny(f"the command's inline code touches {_describe(tags or frozenset({HOME}))} ({piece})")
            if re.search(r"state\.db|soul\.md|constitution\.md|heartbeat\.yml|\.automaton\b", lowered):
                _deny("the command's inline code names the runtime's own files")

    def _stopping(self, name: str, args: list[str], command: Command | None) -> None:
        raw = " ".join(w.raw for w in command.words) if command is not None else " ".join(args)
        mentions_self = _NAMES_SELF.search(raw) is not None
        if name in ("kill", "pkill", "killall", "skill", "slay"):
            if mentions_self:
                _deny("the command stops the automaton")
            if re.search(r"\$\{?PPID\b", raw):
                _deny("the command kills the process that runs the agent")
            if name == "kill" and ("-1" in _kill_pids(args)):
                _deny("the command kills every process the agent's user owns (kill -1)")
            if name in ("pkill", "killall", "skill", "slay"):
                if any(_PYTHON_NAME.fullmatch(a) for a in _operands(args)):
                    _deny("the command kills every Python process, the agent's included")
                if "-u" in args or "--user" in args:
                    _deny("the command kills every process of a user, the agent's included")
        if name in ("systemctl", "service", "initctl", "supervisorctl", "sv", "rc-service"):
            if mentions_self and _STOP_WORDS.search(" ".join(args)):
                _deny("the command stops or restarts the automaton's service")
            if name == "systemctl" and any(a in ("poweroff", "halt", "kexec", "emergency", "rescue") for a in args):
                _deny("the command turns the machine off")
        if name in ("shutdown", "poweroff", "halt") or (name in ("init", "telinit") and args[:1] in (["0"], ["6"], ["1"])):
            _deny("the command turns the machine off")


# --------------------------------------------------------------------------- helpers


def _path_like(piece: str) -> bool:
    return bool(piece) and not piece.startswith("-") and "://" not in piece and len(piece) <= 4096 and "\x00" not in piece


def _basename(verb: str) -> str:
    return verb.rsplit("/", 1)[-1]


def _operands(args: list[str]) -> list[str]:
    """Arguments that are not options (everything after ``--`` counts)."""
    out, rest = [], False
    for arg in args:
        if rest or not arg.startswith("-") or arg == "-":
            out.append(arg)
        elif arg == "--":
            rest = True
    return out


def _unwrap(argv: list[str]) -> tuple[str | None, list[str]]:
    """The command really run (past ``sudo``, ``env``, ``nohup``, keywords ...) and its arguments."""
    i = 0
    while i < len(argv):
        word = argv[i]
        name = _basename(word)
        if word in KEYWORDS or re.fullmatch(r"[A-Za-z_]\w*=.*", word):
            i += 1
            continue
        if name in WRAPPERS:
            i += 1
            with_value = _WRAPPER_OPTIONS_WITH_VALUE.get(name, set())
            while i < len(argv) and (argv[i].startswith("-") or (name == "env" and "=" in argv[i])):
                i += 2 if argv[i] in with_value else 1
            i += WRAPPERS[name]
            continue
        if name == "busybox" and i + 1 < len(argv) and not argv[i + 1].startswith("-") and argv[i + 1] not in SHELLS:
            i += 1
            continue
        return word, argv[i + 1:]
    return None, []


def _is_decoder(verb: str, args: list[str]) -> bool:
    name = _basename(verb)
    joined = " ".join(args)
    if name in ("base64", "base32", "basenc", "gbase64", "b64"):
        return any(a in ("-d", "--decode", "-D") or (a.startswith("-") and not a.startswith("--") and "d" in a) for a in args)
    if name == "xxd":
        return any(a.startswith("-") and "r" in a for a in args)
    if name == "openssl":
        return bool(re.search(r"\b(base64|enc)\b", joined)) and bool(re.search(r"(^|\s)-(d|base64\s+-d)\b", joined))
    if name in ("uudecode", "rev"):
        return True
    if name in ("printf", "echo"):
        return spells_text(joined)
    if name == "tr":
        return bool(re.search(r"n-za-m|N-ZA-M|a-zA-Z\s+n-za-mN-ZA-M", joined))
    return False


def _dash_c(args: list[str]) -> str | None:
    """The command string after ``-c`` (also inside combined flags such as ``-lc``, ``-ec``)."""
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:] and i + 1 < len(args):
            return args[i + 1]
        if not arg.startswith("-"):
            return None
    return None


def _copy_targets(args: list[str]) -> list[str]:
    targets = []
    for i, arg in enumerate(args):
        if arg in ("-t", "--target-directory") and i + 1 < len(args):
            targets.append(args[i + 1])
        elif arg.startswith("--target-directory="):
            targets.append(arg.split("=", 1)[1])
    operands = _operands(args)
    if len(operands) >= 2:
        targets.append(operands[-1])
    return targets


def _xargs_command(args: list[str]) -> list[str]:
    with_value = {"-n", "-L", "-P", "-d", "-E", "-I", "-a", "-s", "--max-args", "--delimiter", "--arg-file"}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in with_value else 1
    return args[i:]


def _kill_pids(args: list[str]) -> list[str]:
    """The process ids a ``kill`` names (its first dash-argument is the signal when more follow)."""
    pids, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            pids += args[i + 1:]
            break
        if arg in ("-s", "-n") and i + 1 < len(args):
            i += 2
            continue
        if arg.startswith("-") and i == 0 and len(args) > 1:
            i += 1
            continue
        pids.append(arg)
        i += 1
    return pids
