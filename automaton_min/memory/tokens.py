"""Token counting: exact cl100k_base counts from a file shipped in the package (``bpe.py``), and a cheap estimate.

The exact encoder loads on a wake cycle's first exact count (about 50 ms) and keeps about 2 MB until the agent
sleeps (tiktoken's took 38 for good); the context counts exactly only when the estimate lands near its capacity.
The BPE file is read from `data/cl100k_base.tiktoken` and its sha256 is checked before use; nothing is ever
fetched. When the file is missing or altered, counts fall back to the estimate (logged once per counter).

The estimate's error by kind of text: README, Memory (Token counting).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import threading
from collections import OrderedDict
from pathlib import Path

from automaton_min.memory.bpe import Cl100k

log = logging.getLogger(__name__)

BPE_PATH = Path(__file__).resolve().parent / "data" / "cl100k_base.tiktoken"
# The hash tiktoken itself pins for cl100k_base (tiktoken_ext/openai_public.py).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# Largest relative error of `estimate_tokens` on the corpus, by kind of text (see the module docstring).
ESTIMATE_ERROR_BOUND = {"readme": 0.15, "code": 0.15, "json": 0.15, "hex": 0.08, "shell": 0.21, "lang": 0.23,
                        "base64": 0.28}
# How close to a budget (relative) the estimate must be before an exact count is made: the largest measured error,
# rounded up, so an estimate outside the band is on the right side of the budget whatever kind the text is
# (agent/context.py).
EXACT_BAND = 0.30
DEFAULT_SAFETY_MARGIN = 0.10
# Model families whose own tokenizer is cl100k_base: counts are exact for them, no margin needed.
CL100K_FAMILIES = ("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada-002")
_NOT_CL100K = ("gpt-4o", "gpt-4.1", "gpt-4.5")


def safety_margin(model_family: str | None) -> float:
    """Fraction of a model's window to leave unused because our counts are not its tokenizer's.

    0 for models that use cl100k_base (GPT-4, GPT-3.5), DEFAULT_SAFETY_MARGIN (10%) for the rest (Gemma,
    Llama, Qwen, Claude, the o200k GPT models, unknown ones).
    """
    name = (model_family or "").strip().lower()
    if name.startswith(_NOT_CL100K):
        return DEFAULT_SAFETY_MARGIN
    if name.startswith(CL100K_FAMILIES):
        return 0.0
    return DEFAULT_SAFETY_MARGIN


_LOWER = re.compile(r"[A-Z]?[a-z]+")
_LONG_LOWER = re.compile(r"[A-Z]?[a-z]{7,}")
_CAPS = re.compile(r"[A-Z]+(?![a-z])")
_DIGITS = re.compile(r"\d{1,3}")
_SPACE = re.compile(r"\s{2,}|\n")
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]+")
_LATIN = re.compile(r"[\u0080-\u024f]")
_CYRILLIC = re.compile(r"[\u0250-\u052f]")
_CJK = re.compile(r"[\u2e80-\ud7af]")
_OTHER = re.compile(r"[^\x00-\u052f\u2e80-\ud7af]")


ESTIMATE_CACHE_SIZE = 8192
ESTIMATE_CACHE_MIN_CHARS = 32  # shorter texts are their own cache keys (``_short_estimate``)
_estimates: "OrderedDict[bytes, int]" = OrderedDict()
_estimates_lock = threading.Lock()


def estimate_tokens(text: str) -> int:
    """A cheap cl100k_base token estimate (``_estimate``), remembered for longer texts by a digest of the text: a
    context is sized several times a turn, and most of its texts were sized the turn before."""
    if len(text) < ESTIMATE_CACHE_MIN_CHARS:
        return _short_estimate(text)
    key = _text_key(text)
    with _estimates_lock:
        n = _estimates.get(key)
        if n is not None:
            _estimates.move_to_end(key)
            return n
    n = _estimate(text)
    with _estimates_lock:
        _estimates[key] = n
        if len(_estimates) > ESTIMATE_CACHE_SIZE:
            _estimates.popitem(last=False)
    return n


def _estimate(text: str) -> int:
    """A cheap cl100k_base token estimate: a few regex passes, no vocabulary (error bounds in the module
    docstring).

    Pieces are priced roughly as the tokenizer's own pattern splits text: a lower-case letter run (with one
    leading capital) one token per 6 letters, a capital run one per 2, a group of up to 3 digits one, an ASCII
    punctuation run one per 1.5 characters (a character right before a letter is free: it merges into the
    word), whitespace with a line break or longer than one space 0.6, accented Latin 0.5 a character, Cyrillic
    or Greek 0.4, CJK and Hangul 1.1, any other character (emoji, symbols) 1.5.
    """
    if not text:
        return 0
    n = float(len(_LOWER.findall(text)))
    n += sum(len(w) / 6.0 - 1.0 for w in _LONG_LOWER.findall(text))
    n += sum(max(1.0, len(w) / 2.0) for w in _CAPS.findall(text))
    n += len(_DIGITS.findall(text))
    n += 0.6 * len(_SPACE.findall(text))
    for m in _PUNCT.finditer(text):
        k = len(m.group())
        if m.end() < len(text) and text[m.end()].isalpha():
            k -= 1
        if k:
            n += max(1.0, k / 1.5)
    if not text.isascii():
        n += 0.5 * len(_LATIN.findall(text)) + 0.4 * len(_CYRILLIC.findall(text))
        n += 1.1 * len(_CJK.findall(text)) + 1.5 * len(_OTHER.findall(text))
    return max(1, math.ceil(n))


@functools.lru_cache(maxsize=4096)
def _short_estimate(text: str) -> int:
    """Short texts (names, small arguments) are kept as their own keys: cheaper than hashing them."""
    return _estimate(text)


def _text_key(text: str) -> bytes:
    """The cache key: a 16-byte BLAKE2b digest of the text (the text itself is never kept)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def load_encoder(path: Path = BPE_PATH, expected_sha256: str = CL100K_SHA256) -> Cl100k:
    """cl100k_base from the shipped BPE file, after checking its sha256. Raises OSError (unreadable) or ValueError
    (hash or format)."""
    data = Path(path).read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise ValueError(f"{path}: sha256 {actual} is not the expected {expected_sha256}")
    encoder = Cl100k(data)
    log.info("exact token counter loaded (cl100k_base, %d tokens)", len(encoder.ranks))
    return encoder


class TokenCounter:
    """Exact cl100k_base counts with an LRU cache keyed by a digest of the text, and the estimate as fallback."""

    def __init__(self, *, cache_size: int = 4096, path: Path = BPE_PATH, expected_sha256: str = CL100K_SHA256) -> None:
        self.cache_size = cache_size
        self.path = Path(path)
        self.expected_sha256 = expected_sha256
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._encoder: Cl100k | None = None
        self._failed: str | None = None  # why the encoder could not be loaded

    @property
    def loaded(self) -> bool:
        """Whether the exact encoder is in memory."""
        return self._encoder is not None

    def _get_encoder(self) -> Cl100k | None:
        if self._encoder is not None or self._failed:
            return self._encoder
        with self._load_lock:
            if self._encoder is None and not self._failed:
                try:
                    self._encoder = load_encoder(self.path, self.expected_sha256)
                except (OSError, ValueError) as e:
                    self._failed = f"{type(e).__name__}: {e}"
                    log.warning("exact token counting unavailable, using the estimate: %s", self._failed)
        return self._encoder

    def unload(self) -> None:
        """Drop the encoder and the counts it made (the agent goes to sleep); the next exact count loads it again."""
        with self._load_lock, self._lock:
            self._encoder = None
            self._cache.clear()

    def count(self, text: str) -> int:
        """The exact cl100k_base count (special-token text counted as plain text); the estimate if the encoder
        cannot load."""
        if not text:
            return 0
        key = _text_key(text)
        with self._lock:
            n = self._cache.get(key)
            if n is not None:
                self._cache.move_to_end(key)
                return n
        enc = self._get_encoder()
        if enc is None:
            return estimate_tokens(text)
        n = enc.count(text)
        with self._lock:
            self._cache[key] = n
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return n


_default: TokenCounter | None = None
_default_lock = threading.Lock()


def default_counter() -> TokenCounter:
    """The process's shared counter (its encoder loads on the first exact count, again after ``unload``)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = TokenCounter()
    return _default


def unload() -> None:
    """The shared counter's encoder dropped, if it was loaded: ``TokenCounter.unload``."""
    if _default is not None:
        _default.unload()


def count_tokens(text: str) -> int:
    """Exact cl100k_base token count of `text` (the estimate if the encoder cannot load)."""
    return default_counter().count(text)
