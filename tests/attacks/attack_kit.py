"""What the attack tests share: a key-leak scanner, log capture, and scripted-model helpers.

``KeyWatch`` reads the private key straight from ``wallet.json`` (not through the product's code) and looks for it
everywhere a leak could land: text (tool results, model requests, logs, error text) and bytes (``state.db`` with
its ``-wal`` and ``-shm`` files, every row of every table). It finds the key as hex (with or without ``0x``, in
any case, with separators between the digits), as raw bytes, as base64 of the key or of ``wallet.json``, and any
16-character piece of those (through the product's ``KeyGuard`` as an extra reading); it also reports the
scrubbers' redaction markers, which only appear when a layer before them let key material through.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from automaton_min.agent.key_guard import REDACTED, KeyGuard
from automaton_min.home import Home
from automaton_min.log import ROOT_LOGGER, configure_logging
from standins.model_servers import OpenAIServer, openai_answer
from standins.social_relay import SocialRelay

LOG_REDACTED = "[redacted]"  # observe.log.scrub's marker for a registered secret (the wallet key among them)
_SEPARATORS = re.compile(r"[^0-9a-fA-F]")


@dataclass
class KeyWatch:
    """The wallet key as a thief would want it, and a scanner for it."""

    key: bytes
    wallet_file: bytes

    @classmethod
    def of(cls, home: Home) -> "KeyWatch":
        raw = home.wallet_path.read_bytes()
        hex_key = json.loads(raw)["privateKey"].removeprefix("0x")
        return cls(bytes.fromhex(hex_key), raw)

    @property
    def hex(self) -> str:
        return self.key.hex()

    @property
    def forms(self) -> dict[str, str]:
        """Whole-key spellings (exact search, case-insensitive for hex)."""
        b64 = base64.b64encode(self.key).decode()
        return {"hex": self.hex, "0x-hex": "0x" + self.hex, "base64": b64.rstrip("="),
                "urlsafe-base64": b64.replace("+", "-").replace("/", "_").rstrip("="),
                "wallet.json base64": base64.b64encode(self.wallet_file).decode()[48:100]}  # the key's part

    def findings(self, text: str, *, allow_redacted: bool = False) -> list[str]:
        """Why ``text`` holds key material (empty when it holds none)."""
        found = []
        lowered = text.lower()
        if self.hex in lowered:
            found.append("the key in hex")
        if self.hex in _SEPARATORS.sub("", text).lower():
            found.append("the key in hex, with separators between the digits")
        for name, form in self.forms.items():
            if name != "hex" and form in text:
                found.append(f"the key as {name}")
        if '"privatekey"' in lowered and self.hex[:16] in lowered:
            found.append("wallet.json's content")
        if KeyGuard(self.key, self.wallet_file).scrub(text) is not text:
            found.append("a 16+ character piece of the key (hex, reversed or base64)")
        if not allow_redacted:
            for marker in (REDACTED, LOG_REDACTED):
                if marker in text:
                    found.append(f"a scrubber's redaction marker {marker} (a layer before it let key material out)")
        return found

    def byte_findings(self, data: bytes) -> list[str]:
        """Key material in raw bytes: the 32 key bytes, or its text forms in any case."""
        found = []
        if self.key in data:
            found.append("the raw key bytes")
        lowered = data.lower()
        for name, form in self.forms.items():
            probe = form.encode()
            if probe.lower() in lowered if name.endswith("hex") else probe in data:
                found.append(f"the key as {name}")
        return found

    def assert_clean(self, where: str, text: str, *, allow_redacted: bool = False) -> None:
        found = self.findings(text, allow_redacted=allow_redacted)
        assert not found, f"key material in {where}: {found}"

    def assert_home_clean(self, home: Home, *, allow_redacted: bool = False) -> None:
        """``state.db``, its WAL and SHM as bytes, and every row of every table as text: no key material
        (``allow_redacted``: the redaction marker is expected where the model itself wrote the key)."""
        for suffix in ("", "-wal", "-shm"):
            path = Path(str(home.default_db_path) + suffix)
            if path.exists():
                found = self.byte_findings(path.read_bytes())
                assert not found, f"key material in {path.name}: {found}"
        self.assert_clean("a state.db row", every_row(home.default_db_path), allow_redacted=allow_redacted)


    def assert_agent_clean(self, agent: Any, model: Any, log: io.StringIO, home: Home, canary: str) -> None:
        """Every tool result and error, every request the model received, the log and ``state.db``: no key
        material, and not the daemon's environment (``canary``, a value planted in it)."""
        agent.db.checkpoint()
        for where, text in {"a tool result or error": json.dumps(stored_calls(agent.db)),
                            "a model request": request_bodies(model), "the log": log.getvalue()}.items():
            self.assert_clean(where, text)
            assert canary not in text, f"the daemon's environment in {where}"
        self.assert_home_clean(home)


def every_row(db_file: Path) -> str:
    """Every row of every table, as text (read-only: nothing is migrated or written)."""
    con = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(repr(row) for table in tables for row in con.execute(f'SELECT * FROM "{table}"'))
    finally:
        con.close()


def capture_logs() -> io.StringIO:
    """The package's log as JSON lines at debug level, into a buffer (conftest's reset_logging undoes it)."""
    buffer = io.StringIO()
    configure_logging("debug", buffer, json_lines=True)
    assert ROOT_LOGGER
    return buffer


def request_bodies(model: Any) -> str:
    """Every request body the model stand-in received, as one text."""
    return "\n".join(json.dumps(r.body) for r in model.requests)


def calls(*pairs: tuple[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(name, arguments)`` pairs as the wire tool calls of one answer."""
    return [(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(pairs)]


def turn(*pairs: tuple[str, dict[str, Any]], text: str | None = None) -> dict:
    return openai_answer(text, calls(*pairs))


SLEEP = ("sleep", {"duration_seconds": 3600, "reason": "done"})


def finish() -> dict:
    return turn(SLEEP, text="Done.")


def tool_messages(body: dict) -> list[str]:
    """The tool results a request carried to the model."""
    return [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "tool"]


def stored_calls(db: Any, name: str | None = None) -> list[tuple[str, dict, str, str | None]]:
    """Tool calls as stored: (name, arguments, result, error), oldest first."""
    query = "SELECT name, arguments, result, error FROM tool_calls"
    params: tuple = ()
    if name:
        query += " WHERE name = ?"
        params = (name,)
    return [(r[0], json.loads(r[1]), r[2], r[3]) for r in db.query(query + " ORDER BY rowid", params)]


def all_text(parts: Iterable[str | None]) -> str:
    return "\n".join(p for p in parts if p)


def run_until_asleep(home_root: Path, argv: list[str], env: dict[str, str] | None = None, timeout_s: float = 60) -> str:
    """Run the real ``automaton-min run`` until it logs that it sleeps, stop it with SIGTERM (exit 0); its output."""
    return run_until(home_root, argv, '"msg":"asleep"', env, timeout_s)


def run_until(home_root: Path, argv: list[str], done: str | threading.Event, env: dict[str, str] | None = None,
              timeout_s: float = 60, times: int = 1) -> str:
    """Run the real ``automaton-min run`` until ``times`` lines of its output hold ``done`` (or the event is set),
    stop it with SIGTERM (exit 0); its output."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, "AUTOMATON_HOME": str(home_root), **(env or {})})
    seen: list[str] = []
    reached = done if isinstance(done, threading.Event) else threading.Event()

    def reader() -> None:
        for line in proc.stdout:
            seen.append(line)
            if isinstance(done, str) and sum(done in said for said in seen) >= times:
                reached.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert reached.wait(timeout_s), "".join(seen)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    thread.join(timeout=10)
    return "".join(seen)


# Fixtures (imported by the attack modules): the scripted model the attacker speaks through, and the loopback relay.

@pytest.fixture
def model():
    with OpenAIServer(mode="llamacpp") as server:
        yield server


@pytest.fixture
def relay(clock):
    with SocialRelay(clock) as server:
        yield server
