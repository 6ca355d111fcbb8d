"""A second line behind confinement: the wallet key and the API keys never reach the model, in any disguise.

What it finds is README's (Security, behind the kernel), in pieces of at least ``WINDOW`` characters. Each match is
replaced in the original text, from its first to its last character, by ``[redacted: wallet key material]``.
"""

from __future__ import annotations

import base64
import re
from typing import Any

WINDOW = 16  # 64 bits of a 256-bit key: a shorter run is no help to a thief, and common text never matches by chance
REDACTED = "[redacted: wallet key material]"
_HEX = re.compile(r"[0-9a-fA-F]")
_B64 = re.compile(r"[A-Za-z0-9+/_-]")
_B32 = re.compile(r"[A-Za-z2-7]")
_B64_OUTSIDE = re.compile(r"[^A-Za-z0-9+/_-]")


def _windows(texts: list[str]) -> set[str]:
    return {text[i:i + WINDOW] for text in texts for i in range(len(text) - WINDOW + 1)}


def _b64_forms(data: bytes) -> list[str]:
    """base64 of ``data`` starting at each of the three byte alignments, without the uncertain edge characters."""
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(data[shift:]).decode().rstrip("=")
        forms.append(encoded[:-2] if len(encoded) > 2 else encoded)
    forms += [f.replace("+", "-").replace("/", "_") for f in forms]  # URL-safe alphabet
    return forms


def _b32_forms(data: bytes) -> list[str]:
    """base32 of ``data`` starting at each of the five byte alignments, without the uncertain edge characters,
    in lower case (base32 is read without regard to case)."""
    forms = []
    for shift in range(5):
        encoded = base64.b32encode(data[shift:]).decode().rstrip("=").lower()
        forms.append(encoded[:-2] if len(encoded) > 2 else encoded)
    return forms


def _both_ways(forms: list[str]) -> list[str]:
    return forms + [form[::-1] for form in forms]


class KeyGuard:
    """Finds and redacts key material in text. Built once from the wallet key, the wallet file's bytes and the
    API keys (``secrets``)."""

    def __init__(self, key: bytes, wallet_file: bytes = b"", secrets: tuple[str, ...] | list[str] = ()) -> None:
        hex_key = key.hex()
        texts = [("0x" + hex_key).encode(), *(secret.encode() for secret in secrets if len(secret) >= WINDOW)]
        self._hex = _windows(_both_ways([hex_key, *(text.hex() for text in texts)]))
        b64 = _b64_forms(key) + (_b64_forms(wallet_file) if wallet_file else [])
        b64 += [form for text in texts for form in _b64_forms(text)]
        b64 += [_B64_OUTSIDE.sub("", secret) for secret in secrets if len(secret) >= WINDOW]
        self._b64 = _windows(_both_ways(b64))
        self._b32 = _windows(_both_ways([form for data in (key, *texts) for form in _b32_forms(data)]))

    def scrub(self, text: str) -> str:
        """``text`` with every piece of key material replaced; unchanged (the same object) when there is none."""
        spans = (self._find(text, _HEX, self._hex, fold=True) + self._find(text, _B64, self._b64, fold=False)
                 + self._find(text, _B32, self._b32, fold=True))
        if not spans:
            return text
        spans.sort()
        merged = [list(spans[0])]
        for start, end in spans[1:]:
            if start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        pieces, cursor = [], 0
        for start, end in merged:
            pieces += [text[cursor:start], REDACTED]
            cursor = end
        pieces.append(text[cursor:])
        return "".join(pieces)

    def in_arguments(self, arguments: Any) -> bool:
        """True when any text in a tool call's arguments (keys and values, any depth) holds key material: the model
        never needs the key, so such a call is refused before it runs."""
        texts: list[str] = []

        def collect(value: Any) -> None:
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, dict):
                for key, item in value.items():
                    collect(key)
                    collect(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    collect(item)

        collect(arguments)
        return any(self.scrub(text) is not text for text in texts)

    def redact(self, value: Any) -> Any:
        """``value`` (text, or a JSON-like tree of dicts and lists) with key material scrubbed from every string;
        the same object when there is none. What a model wrote with the key in it is stored this way."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            pairs = [(self.redact(k), self.redact(v)) for k, v in value.items()]
            unchanged = all(nk is k and nv is v for (nk, nv), (k, v) in zip(pairs, value.items()))
            return value if unchanged else dict(pairs)
        if isinstance(value, (list, tuple)):
            items = [self.redact(item) for item in value]
            return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
        return value

    @staticmethod
    def _find(text: str, alphabet: re.Pattern, windows: set[str], *, fold: bool) -> list[tuple[int, int]]:
        """Spans of ``text`` whose characters of ``alphabet``, read with everything else skipped, match a window."""
        positions = [m.start() for m in alphabet.finditer(text)]
        if len(positions) < WINDOW:
            return []
        squeezed = "".join(text[p] for p in positions)
        if fold:
            squeezed = squeezed.lower()
        spans = []
        for i in range(len(squeezed) - WINDOW + 1):
            if squeezed[i:i + WINDOW] in windows:
                spans.append((positions[i], positions[i + WINDOW - 1] + 1))
        return spans
