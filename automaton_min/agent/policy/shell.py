"""A small reader for POSIX shell commands, so the policy sees what a command would do, not how it is spelled.

It is not a shell. It reads enough to undo the usual disguises: quotes and
backslashes inside words (``r''m``, ``w"a"llet.json``, ``\\rm``), ANSI-C strings
(``$'\\x72m'``), variables (``$HOME``, ``${HOME}``, ``${X:-default}``, ``${IFS}``,
and names assigned earlier in the same command), ``~``, brace lists
(``wallet.{json,bak}``), command substitutions (``$(...)``, backticks, ``<(...)``)
whose text is handed to the caller, heredocs, and the operators that separate
commands, pipelines and redirections.

``parse(text)`` gives pipelines of ``Command`` (words and redirections);
``Expander`` turns a ``Word`` into the fields the shell would pass, as a set of
alternatives when a value is uncertain (an unknown variable expands to nothing).
"""

from __future__ import annotations

import codecs
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_ALTERNATIVES = 16

_OPERATORS = sorted(
    [";;", "&&", "||", "|&", ">>", "<<<", "<<-", "<<", "&>>", "&>", ">&", "<&", ">|", "<>",
     ";", "&", "|", "(", ")", "<", ">", "\n"],
    key=len, reverse=True,
)
REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<-", "<<<", "<&", "<>"})
WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
_SEPARATORS = frozenset({";", ";;", "&", "&&", "||", "\n", "(", ")"})
_PIPES = frozenset({"|", "|&"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_SPECIAL_PARAMS = "@*#?$!-0123456789"


@dataclass
class Part:
    """A piece of a word: literal text, a variable, a command substitution, or arithmetic."""

    kind: str  # "lit" | "var" | "cmd" | "arith"
    text: str
    quoted: bool = False
    op: str = ""              # for ${NAME<op>word}: ":-", "-", ":=", "=", ":+", "+", or "other"
    word: "Word | None" = None  # the word after the operator


@dataclass
class Word:
    parts: list[Part]
    raw: str
    heredoc: str | None = None  # the body, when this word is a heredoc's delimiter

    def literal(self) -> str:
        """The word's text with quotes removed and nothing expanded."""
        return "".join(p.text for p in self.parts if p.kind == "lit")

    def substitutions(self) -> list[str]:
        """The texts of every command substitution in the word, nested ones in defaults included."""
        found = []
        for part in self.parts:
            if part.kind == "cmd":
                found.append(part.text)
            if part.word is not None:
                found += part.word.substitutions()
        return found


@dataclass
class Op:
    text: str


@dataclass
class Command:
    words: list[Word] = field(default_factory=list)
    redirects: list[tuple[str, Word]] = field(default_factory=list)


Pipeline = list[Command]


# --------------------------------------------------------------------------- escapes

_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|0?[0-7]{1,3}|c.|.)", re.S)


def decode_escapes(text: str) -> str:
    """Backslash escapes as ``$'...'``, ``printf`` and ``echo -e`` read them (``\\x41``, ``\\101``, ``\\u0041``, ``\\n``)."""
    def one(match: re.Match[str]) -> str:
        body = match.group(1)
        head = body[0]
        try:
            if head == "x":
                return chr(int(body[1:], 16))
            if head in "uU":
                return chr(int(body[1:], 16))
            if head in "01234567":
                return chr(int(body, 8) & 0xFF)
        except (ValueError, OverflowError):
            return body
        if head == "c" and len(body) == 2:
            return chr(ord(body[1]) & 0x1F)
        return _ANSI_SIMPLE.get(body, "\\" + body)
    return _ESCAPE.sub(one, text)


# --------------------------------------------------------------------------- lexer


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.i = 0
        self.tokens: list[Word | Op] = []
        self.parts: list[Part] = []
        self.buf: list[str] = []
        self.word_start = 0
        self.pending_heredocs: list[tuple[Word | None, bool]] = []
        self.expect_heredoc_word: bool | None = None  # strip-tabs flag for the next word

    # -- helpers

    def peek(self, n: int = 0) -> str:
        j = self.i + n
        return self.src[j] if j < len(self.src) else ""

    def flush(self, quoted: bool = False) -> None:
        if self.buf:
            self.parts.append(Part("lit", "".join(self.buf), quoted))
            self.buf = []

    def in_word(self) -> bool:
        return bool(self.parts or self.buf)

    def end_word(self) -> None:
        self.flush()
        if self.parts:
            word = Word(self.parts, self.src[self.word_start:self.i])
            self.tokens.append(word)
            if self.expect_heredoc_word is not None:
                self.pending_heredocs.append((word, self.expect_heredoc_word))
                self.expect_heredoc_word = None
        self.parts = []

    def start_word(self) -> None:
        if not self.in_word():
            self.word_start = self.i

    def read_until_quote(self, quote: str) -> str:
        end = self.src.find(quote, self.i)
        if end < 0:
            end = len(self.src)
        text = self.src[self.i:end]
        self.i = min(end + 1, len(self.src))
        return text

    def read_balanced(self, opener: str, closer: str) -> str:
        """From just after ``opener``: text up to the matching ``closer`` (quotes respected)."""
        depth, start = 1, self.i
        while self.i < len(self.src):
            ch = self.src[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if ch == "'":
                self.i += 1
                self.read_until_quote("'")
                continue
            if ch == '"':
                self.i += 1
                while self.i < len(self.src) and self.src[self.i] != '"':
                    self.i += 2 if self.src[self.i] == "\\" else 1
                self.i += 1
                continue
            if ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth == 0:
                    text = self.src[start:self.i]
                    self.i += 1
                    return text
            self.i += 1
        return self.src[start:]

    def read_backticks(self) -> str:
        out = []
        while self.i < len(self.src) and self.src[self.i] != "`":
            if self.src[self.i] == "\\" and self.peek(1) in "`\\$":
                out.append(self.src[self.i + 1])
                self.i += 2
                continue
            out.append(self.src[self.i])
            self.i += 1
        self.i += 1
        return "".join(out)

    # -- dollar forms

    def dollar(self, quoted: bool) -> None:
        """At ``$``: read one expansion into ``parts``."""
        nxt = self.peek(1)
        if nxt == "'" and not quoted:
            self.flush()
            self.i += 2
            out = []
            while self.i < len(self.src) and self.src[self.i] != "'":
                if self.src[self.i] == "\\" and self.i + 1 < len(self.src):
                    out.append(self.src[self.i:self.i + 2])
                    self.i += 2
                    continue
                out.append(self.src[self.i])
                self.i += 1
            self.i += 1
            self.parts.append(Part("lit", decode_escapes("".join(out)), True))
            return
        if nxt == "(" and self.peek(2) == "(":
            self.flush(quoted)
            self.i += 3
            self.read_balanced("(", ")")
            if self.peek() == ")":
                self.i += 1
            self.parts.append(Part("arith", "0", quoted))
            return
        if nxt == "(":
            self.flush(quoted)
            self.i += 2
            self.parts.append(Part("cmd", self.read_balanced("(", ")"), quoted))
            return
        if nxt == "{":
            self.flush(quoted)
            self.i += 2
            self.parts.append(_parameter(self.read_balanced("{", "}"), quoted))
            return
        match = _NAME.match(self.src, self.i + 1)
        if match:
            self.flush(quoted)
            self.parts.append(Part("var", match.group(0), quoted))
            self.i = match.end()
            return
        if nxt and nxt in _SPECIAL_PARAMS:
            self.flush(quoted)
            self.parts.append(Part("var", nxt, quoted))
            self.i += 2
            return
        self.buf.append("$")
        self.i += 1

    def double_quoted(self) -> None:
        self.flush()
        self.i += 1
        while self.i < len(self.src):
            ch = self.src[self.i]
            if ch == '"':
                self.i += 1
                break
            if ch == "\\":
                nxt = self.peek(1)
                if nxt in '$`"\\':
                    self.buf.append(nxt)
                    self.i += 2
                    continue
                if nxt == "\n":
                    self.i += 2
                    continue
                self.buf.append(ch)
                self.i += 1
                continue
            if ch == "$":
                self.dollar(True)
                continue
            if ch == "`":
                self.flush(True)
                self.i += 1
                self.parts.append(Part("cmd", self.read_backticks(), True))
                continue
            self.buf.append(ch)
            self.i += 1
        self.flush(True)

    # -- main loop

    def run(self) -> list[Word | Op]:
        src = self.src
        while self.i < len(src):
            ch = src[self.i]
            if ch in " \t\r":
                self.end_word()
                self.i += 1
                continue
            if ch == "#" and not self.in_word():
                end = src.find("\n", self.i)
                self.i = len(src) if end < 0 else end
                continue
            if ch == "\\":
                self.start_word()
                if self.peek(1) == "\n":
                    self.i += 2
                    continue
                self.flush()
                if self.i + 1 < len(src):
                    self.parts.append(Part("lit", src[self.i + 1], True))
                self.i += 2
                continue
            if ch == "'":
                self.start_word()
                self.flush()
                self.i += 1
                self.parts.append(Part("lit", self.read_until_quote("'"), True))
                continue
            if ch == '"':
                self.start_word()
                self.double_quoted()
                continue
            if ch == "$":
                self.start_word()
                self.dollar(False)
                continue
            if ch == "`":
                self.start_word()
                self.flush()
                self.i += 1
                self.parts.append(Part("cmd", self.read_backticks()))
                continue
            if ch in "<>" and self.peek(1) == "(" and not self.in_word():
                self.start_word()
                self.i += 2
                self.parts.append(Part("cmd", self.read_balanced("(", ")")))
                continue
            op = next((o for o in _OPERATORS if src.startswith(o, self.i)), None)
            if op is not None:
                if ch in "<>&" and self.buf and not self.parts and "".join(self.buf).isdigit():
                    self.buf = []  # a file descriptor number belongs to the redirection
                self.end_word()
                self.tokens.append(Op(op))
                self.i += len(op)
                if op in ("<<", "<<-"):
                    self.expect_heredoc_word = op == "<<-"
                if op == "\n":
                    self.read_heredoc_bodies()
                continue
            self.start_word()
            self.buf.append(ch)
            self.i += 1
        self.end_word()
        self.read_heredoc_bodies()
        return self.tokens

    def read_heredoc_bodies(self) -> None:
        for word, strip_tabs in self.pending_heredocs:
            delimiter = word.literal() if word is not None else ""
            lines = []
            while self.i < len(self.src):
                end = self.src.find("\n", self.i)
                line = self.src[self.i:] if end < 0 else self.src[self.i:end]
                self.i = len(self.src) if end < 0 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            if word is not None:
                word.heredoc = "\n".join(lines)
        self.pending_heredocs = []


def _parameter(body: str, quoted: bool) -> Part:
    """``${...}``: the name, and for the operators that matter, the word after it."""
    if body.startswith("#") and len(body) > 1:
        return Part("arith", "0", quoted)
    match = _NAME.match(body) or (re.match(r"[@*#?$!\-0-9]", body))
    if not match:
        return Part("var", "", quoted)
    name, rest = match.group(0), body[match.end():]
    if not rest:
        return Part("var", name, quoted)
    for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
        if rest.startswith(op):
            return Part("var", name, quoted, op, lex_word(rest[len(op):]))
    return Part("var", name, quoted, "other")


def lex(text: str) -> list[Word | Op]:
    return _Lexer(text).run()


def lex_word(text: str) -> Word:
    """``text`` read as the inside of one word (spaces kept), as in ``${X:-a b}``."""
    lexer = _Lexer(text)
    lexer.run()
    parts: list[Part] = []
    for token in lexer.tokens:
        if isinstance(token, Word):
            if parts:
                parts.append(Part("lit", " ", True))
            parts += token.parts
    return Word(parts, text)


def parse(text: str) -> list[Pipeline]:
    """Pipelines of simple commands; grouping, subshells and control flow are flattened."""
    pipelines: list[Pipeline] = []
    current: Pipeline = []
    command = Command()
    tokens = lex(text)
    i = 0

    def close_command() -> None:
        nonlocal command
        if command.words or command.redirects:
            current.append(command)
        command = Command()

    while i < len(tokens):
        token = tokens[i]
        if isinstance(token, Op):
            if token.text in REDIRECTS:
                if i + 1 < len(tokens) and isinstance(tokens[i + 1], Word):
                    command.redirects.append((token.text, tokens[i + 1]))
                    i += 2
                    continue
            elif token.text in _PIPES:
                close_command()
            elif token.text in _SEPARATORS:
                close_command()
                if current:
                    pipelines.append(current)
                current = []
            i += 1
            continue
        command.words.append(token)
        i += 1
    close_command()
    if current:
        pipelines.append(current)
    return pipelines


def is_assignment(word: Word) -> bool:
    first = word.parts[0] if word.parts else None
    return bool(first and first.kind == "lit" and not first.quoted and _ASSIGNMENT.match(first.text))


# --------------------------------------------------------------------------- expansion


def brace_expand(text: str, limit: int = MAX_ALTERNATIVES) -> list[str]:
    """``a{b,c}d`` -> ``abd``, ``acd`` (nested lists too), at most ``limit`` results."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", text)
    if not match:
        return [text]
    out: list[str] = []
    for option in match.group(1).split(","):
        for expanded in brace_expand(text[:match.start()] + option + text[match.end():], limit):
            out.append(expanded)
            if len(out) >= limit:
                return out
    return out


class Expander:
    """Expands words the way the shell would, with what is known: variables, ``~`` and substitutions.

    ``env`` maps a name to its possible values; ``tildes`` are the meanings of
    ``~``; ``substitute(text)`` returns the possible outputs of ``$(text)``
    (an empty list when unknown, which expands to nothing).
    """

    def __init__(self, env: dict[str, list[str]], tildes: tuple[str, ...],
                 substitute: Callable[[str], list[str]]) -> None:
        self.env = env
        self.tildes = tildes
        self.substitute = substitute

    def separators(self) -> str:
        """The characters unquoted expansions are split on (``$IFS`` when the command set it)."""
        ifs = self.env.get("IFS")
        return (ifs[0] if ifs else "") + " \t\n"

    def values(self, name: str) -> list[str] | None:
        if name == "IFS":
            return self.env.get("IFS") or [" "]
        if name == "HOME" and name not in self.env:
            return list(self.tildes)
        return self.env.get(name)

    def _part(self, part: Part, first: bool) -> list[tuple[str, bool]]:
        """Alternatives for one part, each as (text, may be split into fields)."""
        split = not part.quoted and part.kind in ("var", "cmd")
        if part.kind == "lit":
            texts = [part.text]
            if not part.quoted:
                texts = brace_expand(part.text)
                if first:
                    texts = [t2 for t in texts for t2 in self._tilde(t)]
            return [(t, False) for t in texts]
        if part.kind == "arith":
            return [("0", False)]
        if part.kind == "cmd":
            return [(t, split) for t in (self.substitute(part.text) or [""])]
        known = self.values(part.text)
        if part.op in (":-", "-", ":=", "="):
            chosen = known if known else self.word(part.word) if part.word else [""]
        elif part.op in (":+", "+"):
            chosen = (self.word(part.word) if part.word else [""]) if known else [""]
        else:
            chosen = known or [""]
        return [(t, split) for t in chosen]

    def _tilde(self, text: str) -> list[str]:
        if text == "~" or text.startswith("~/"):
            return [t + text[1:] for t in self.tildes]
        return [text]

    def fields(self, word: Word, *, split: bool = True) -> list[list[str]]:
        """The word's alternatives, each a list of fields (one field when ``split`` is False)."""
        choices = [self._part(p, i == 0) for i, p in enumerate(word.parts)]
        results: list[list[str]] = []
        for combo in itertools.islice(itertools.product(*choices), MAX_ALTERNATIVES):
            fields = [""]
            for text, splittable in combo:
                if splittable and split:
                    pieces = re.split(f"[{re.escape(self.separators())}]+", text)
                    fields[-1] += pieces[0]
                    fields += pieces[1:]
                else:
                    fields[-1] += text
            kept = [f for f in fields if f] or ([""] if not split else [])
            if kept not in results:
                results.append(kept)
        return results

    def word(self, word: Word | None) -> list[str]:
        """The word as single strings (no field splitting), one per alternative."""
        if word is None:
            return [""]
        return [" ".join(f) for f in self.fields(word, split=False)]


def printf_output(args: list[str]) -> str:
    """What ``printf FORMAT ARGS`` prints, for ``%s``/``%b``/``%c``/``%d`` and escapes (enough to see a disguised name)."""
    if not args:
        return ""
    fmt, rest = decode_escapes(args[0]), list(args[1:])
    specs = re.findall(r"%[-#0 +]*\d*(?:\.\d+)?[sbcdiuxXo%]", fmt)
    if not [s for s in specs if s != "%%"]:
        return fmt.replace("%%", "%")
    out, guard = [], 0
    while True:
        def fill(match: re.Match[str]) -> str:
            spec = match.group(0)
            if spec == "%%":
                return "%"
            value = rest.pop(0) if rest else ""
            return decode_escapes(value) if spec.endswith("b") else value[:1] if spec.endswith("c") else value
        out.append(re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sbcdiuxXo%]", fill, fmt))
        guard += 1
        if not rest or guard > 64:
            return "".join(out)


def echo_output(args: list[str]) -> list[str]:
    """What ``echo ARGS`` prints; both readings when escapes may or may not be interpreted (dash vs bash)."""
    words = list(args)
    while words and re.fullmatch(r"-[neE]+", words[0]):
        words.pop(0)
    plain = " ".join(words)
    decoded = decode_escapes(plain)
    return [plain] if decoded == plain else [plain, decoded]


_NUMERIC_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|0?[0-7]{2,3})")


def has_escape_codes(text: str) -> bool:
    """True when ``text`` spells characters by number (``\\x72``, ``\\162``, ``\\u0072``)."""
    return bool(_NUMERIC_ESCAPE.search(text))


def spells_text(text: str) -> bool:
    """True when numeric escapes in ``text`` spell visible characters (``\\x72`` is ``r``), not just
    control codes such as the terminal colour ``\\033``."""
    return any(ch.isprintable() and not ch.isspace() for m in _NUMERIC_ESCAPE.finditer(text)
               for ch in decode_escapes(m.group(0)))


def codec_decode(data: bytes) -> str | None:
    """Bytes as text when they read as text (used for decoded literals), else ``None``."""
    try:
        text = codecs.decode(data, "utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t")
    if len(text) < 4 or printable < 0.95 * len(text) or not re.search(r"[A-Za-z]", text):
        return None
    return text
