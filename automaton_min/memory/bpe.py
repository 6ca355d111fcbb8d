"""cl100k_base without tiktoken: the same token ids in about 2 MB instead of tiktoken's 38.

The ranks are kept in one bytes blob, an array of offsets and an open-addressing hash table (no object per
token); text is split with cl100k's pattern, rewritten for the standard library's ``re``; each piece is merged
pair by pair, lowest rank first, as tiktoken does. tiktoken stays the oracle (tests/test_tokens.py).

``re`` has no ``\\p{L}`` or ``\\p{N}``. Its ``\\w`` is letters, numbers and ``_``, and ``\\d`` the decimal digits;
the other numbers (Nl, No: Roman numerals, superscripts, fractions) are listed at load, so letters are
``[^\\W\\d_<others>]`` and numbers ``[\\d<others>]``. ``\\s`` is spelled out as Unicode's White_Space, which
tiktoken's ``\\s`` is (``re``'s also takes U+001C..U+001F). Characters newer than Python's Unicode tables (14.0 in
3.11) are neither letters nor numbers here, unlike in tiktoken's Rust regex: the one difference.
"""

from __future__ import annotations

import binascii
import heapq
import re
from array import array
from functools import lru_cache
from itertools import accumulate, chain
from operator import methodcaller
from typing import Iterator

_GROUP = methodcaller("group")
_SURROGATE = re.compile("[\ud800-\udfff]")
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
PIECE_CACHE_SIZE = 2048
CHUNK_BYTES = 1 << 16
_NO_RANK = -1


def other_numbers(last: int = 0x1FFFF) -> str:
    """A character class body of the numbers that are neither decimal digits nor letters, up to ``last`` (planes 0
    and 1 hold them all: checked by a test over every plane)."""
    codes = chain(range(0x80, 0xD800), range(0xE000, last + 1))
    ranges: list[list[int]] = []
    for char in filter(str.isnumeric, map(chr, codes)):  # one character at a time: none of them is held
        if not char.isdecimal() and not char.isalpha():
            code = ord(char)
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


def split_pattern(numbers: str | None = None) -> re.Pattern[str]:
    """cl100k's pattern for ``re`` (see the module docstring)."""
    others = other_numbers() if numbers is None else numbers
    letter, number = rf"[^\W\d_{others}]", rf"[\d{others}]"
    space, not_space = f"[{WHITESPACE}]", f"[^{WHITESPACE}]"
    not_letter_number_newline = r"(?:_|[^\w\r\n])"
    symbol = rf"(?:_|[^\w{WHITESPACE}])"
    return re.compile("|".join((
        r"'(?i:[sdmt]|ll|ve|re)",
        rf"{not_letter_number_newline}?+{letter}++",
        rf"{number}{{1,3}}+",
        rf" ?{symbol}++[\r\n]*+",
        rf"{space}++\Z",
        rf"{space}*[\r\n]",
        rf"{space}+(?!{not_space})",
        space,
    )))


class Ranks:
    """Token bytes -> rank, for ranks 0..n-1 listed in order, ``base64 rank`` pairs (``load_encoder`` has checked
    the file's sha256: a chunk's first and last rank are checked here, not each)."""

    def __init__(self, data: bytes) -> None:
        size = 1 << ((data.count(b"\n") + 1) * 2).bit_length()  # at most half full
        table, mask, blob, offsets, start = array("i", [_NO_RANK]) * size, size - 1, bytearray(), array("I", [0]), 0
        while start < len(data):  # a chunk at a time: 100,000 small objects at once would stay as heap
            end = data.find(b"\n", start + CHUNK_BYTES) + 1 or len(data)
            fields, first = data[start:end].split(), len(offsets) - 1
            last = first + len(fields) // 2 - 1
            if len(fields) % 2 or fields[1:2] != [b"%d" % first] or fields[-1] != b"%d" % last:
                raise ValueError(f"ranks from {first} on are malformed or out of order")
            tokens = list(map(binascii.a2b_base64, fields[0::2]))
            blob += b"".join(tokens)
            offsets.extend(accumulate(map(len, tokens), initial=offsets.pop()))
            for rank, code in enumerate(map(hash, tokens), first):
                slot = code & mask
                while table[slot] != _NO_RANK:
                    slot = (slot + 1) & mask
                table[slot] = rank
            start = end
        self.blob, self.offsets, self.table, self.mask = bytes(blob), offsets, table, mask

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, token: bytes) -> int | None:
        """The rank of ``token``, or None when it is not a token."""
        blob, offsets, table, mask = self.blob, self.offsets, self.table, self.mask
        slot = hash(token) & mask
        while (rank := table[slot]) != _NO_RANK:
            start, end = offsets[rank], offsets[rank + 1]
            if end - start == len(token) and blob[start:end] == token:
                return rank
            slot = (slot + 1) & mask
        return None


def merge(piece: bytes, rank_of) -> list[int]:
    """The ranks of ``piece`` after byte-pair merging: the adjacent pair whose joined bytes rank lowest first, the
    leftmost of equals (a heap of candidate pairs, so a long piece costs n log n, not n squared)."""
    whole = rank_of(piece)
    if whole is not None:
        return [whole]
    n = len(piece)
    ends = list(range(1, n + 1))  # ends[i]: where the part starting at i ends (for live parts)
    before = list(range(-1, n - 1))  # before[i]: the start of the part before the one at i
    heap = [(rank, i, i + 2) for i in range(n - 1) if (rank := rank_of(piece[i:i + 2])) is not None]
    heapq.heapify(heap)
    while heap:
        _, start, end = heapq.heappop(heap)
        middle = ends[start]
        if middle >= n or ends[middle] != end or before[middle] != start:
            continue  # stale: one of the two parts has merged since
        ends[start], before[middle] = end, _NO_RANK
        if end < n:
            before[end] = start
            following = ends[end]
            if (rank := rank_of(piece[start:following])) is not None:
                heapq.heappush(heap, (rank, start, following))
        if (previous := before[start]) >= 0 and (rank := rank_of(piece[previous:end])) is not None:
            heapq.heappush(heap, (rank, previous, end))
    tokens, start = [], 0
    while start < n:
        tokens.append(rank_of(piece[start:ends[start]]))
        start = ends[start]
    return tokens


class Cl100k:
    """An encoder built from the ranks file's bytes; ``encode`` gives tiktoken's ``encode_ordinary`` ids (special
    tokens' text is plain text)."""

    def __init__(self, data: bytes) -> None:
        self.ranks = Ranks(data)
        self.pattern = split_pattern()
        rank_of = self.ranks.get  # not self: a dropped encoder is freed at once, no cycle for the collector to find
        self._piece_count = lru_cache(maxsize=PIECE_CACHE_SIZE)(lambda piece: len(merge(piece.encode(), rank_of)))

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._pieces(text):
            ids += merge(piece.encode("utf-8"), self.ranks.get)
        return ids

    def count(self, text: str) -> int:
        return sum(map(self._piece_count, self._pieces(text)))

    def _pieces(self, text: str) -> Iterator[str]:
        """The text split as cl100k splits it, a piece at a time (a list of every piece would stay as heap)."""
        return map(_GROUP, self.pattern.finditer(_valid(text)))


def _valid(text: str) -> str:
    """``text`` with lone surrogates made U+FFFD (and paired ones joined), as tiktoken reads such text."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
