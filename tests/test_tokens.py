"""Token counting: the shipped cl100k_base file and our encoder of it against tiktoken (the oracle), offline loading,
the hash check, the cache and the estimate."""

import hashlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import unicodedata
import weakref
from pathlib import Path

import pytest

from automaton_min.memory import tokens
from automaton_min.memory.bpe import Ranks, other_numbers
from automaton_min.memory.tokens import (
    BPE_PATH,
    CL100K_SHA256,
    ESTIMATE_ERROR_BOUND,
    TokenCounter,
    estimate_tokens,
    load_encoder,
    safety_margin,
)

CORPUS = Path(__file__).parent / "data" / "token_corpus.json"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

# Token ids for cl100k_base as published by OpenAI (tiktoken's README and its cookbook on counting tokens).
PUBLISHED = [
    ("hello world", [15339, 1917]),
    ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
    ("antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
    ("2 + 2 = 4", [17, 489, 220, 17, 284, 220, 19]),
    ("お誕生日おめでとう", [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699]),
]

DEAD_PROXY = "http://127.0.0.1:9"


def random_texts(n: int, seed: int = 10) -> list[str]:
    rng = random.Random(seed)
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t.,;:!?'\"()[]{}<>/\\-_=+*&^%$#@~`|"
                "éüßçñøåœ漢字かなカナ한국어Жизнь🙂🚀—…€")
    words = ["the", " agent", " pays", "credits", " USDC", "0x", "deadbeef", "  ", "\n\n", "    def", " return",
             "<|endoftext|>", "don't", "I'm", "1234567", "https://", "{\"ok\": true}"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.5:
                parts.append(rng.choice(words))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))))
        out.append("".join(parts))
    return out


@pytest.fixture(scope="module")
def shipped():
    return load_encoder()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """cl100k_base built by tiktoken's own constructor (its pattern, its special tokens, its loader and hash
    check), from a cache seeded with the shipped file and with no way out to the network."""
    import tiktoken
    from tiktoken_ext import openai_public

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    shutil.copyfile(BPE_PATH, cache / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        mp.setenv(var, DEAD_PROXY)
    try:
        return tiktoken.Encoding(**openai_public.cl100k_base())
    finally:
        mp.undo()


def test_shipped_file_is_the_published_one():
    assert hashlib.sha256(BPE_PATH.read_bytes()).hexdigest() == CL100K_SHA256
    assert CL100K_SHA256 == "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


@pytest.mark.parametrize("text,ids", PUBLISHED)
def test_published_counts(shipped, text, ids):
    assert shipped.encode(text) == ids
    assert TokenCounter().count(text) == len(ids)


def test_counts_match_tiktokens_own_cl100k_on_random_texts(shipped, reference):
    counter = TokenCounter()
    for text in random_texts(400):
        assert shipped.encode(text) == reference.encode_ordinary(text), text
        assert counter.count(text) == len(reference.encode_ordinary(text))


def test_counts_match_tiktokens_pure_python_bpe(shipped, reference):
    from tiktoken._educational import SimpleBytePairEncoding

    slow = SimpleBytePairEncoding(pat_str=reference._pat_str, mergeable_ranks=reference._mergeable_ranks)
    for text in random_texts(25, seed=3):
        assert slow.encode(text, visualise=None) == shipped.encode(text), text


def test_every_kind_of_character_splits_and_merges_as_tiktoken(shipped, reference):
    """A sample of the assigned characters (every 11th, and all of Latin-1 and the general punctuation), each next
    to letters, digits, spaces, itself, a line break and an apostrophe: the pattern's classes are tiktoken's.
    (Every assigned character was checked so once, in 30 s.)"""
    chars = [chr(code) for code in range(0x110000) if (code < 0x100 or 0x2000 <= code < 0x2070 or code % 11 == 0)
             and unicodedata.category(chr(code)) not in ("Cn", "Cs")]
    text = "".join(f"a{c}b {c}{c}1{c}2{c}\n'{c}l\u3000{c}" for c in chars)
    assert shipped.encode(text) == reference.encode_ordinary(text)


def test_pieces_long_and_odd_match_tiktoken(shipped, reference):
    for text in ["a" * 20_000, "ab" * 10_000, " " * 5_000 + "x", "\ud83d\ude42 lone \udc00 surrogates \ud800",
                 "'S 'ſ 'LL 'Ve", "x\x1c\x1d y\x1f\n", "Ⅻ ½² ①②③ ٣٤٥"]:
        assert shipped.encode(text) == reference.encode_ordinary(text), text
        assert shipped.count(text) == len(reference.encode_ordinary(text)), text


def test_other_numbers_all_lie_in_the_first_two_planes():
    assert other_numbers(0x10FFFF) == other_numbers()


def test_ranks_out_of_order_or_malformed_are_refused():
    with pytest.raises(ValueError):
        Ranks(b"YQ== 0\nYg== 2\n")
    with pytest.raises(ValueError):
        Ranks(b"YQ==\n")
    ranks = Ranks(b"YQ== 0\nYg== 1\nYWI= 2\n")
    assert (len(ranks), ranks.get(b"ab"), ranks.get(b"b"), ranks.get(b"ba")) == (3, 2, 1, None)


def test_loads_with_networking_disabled(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(cache))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[var] = DEAD_PROXY
    script = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise OSError('network disabled in this test')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "import sys\n"
        "from automaton_min.memory.tokens import TokenCounter\n"
        "c = TokenCounter()\n"
        "print(c.count('hello world'), c.count('tiktoken is great!'), c.loaded, c._failed,\n"
        "      'tiktoken' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "6", "True", "None", "False"]
    assert list(cache.iterdir()) == []


def test_tampered_file_is_refused_and_falls_back_to_the_estimate(tmp_path, caplog):
    data = bytearray(BPE_PATH.read_bytes())
    data[100] = ord("A") if data[100] != ord("A") else ord("B")
    bad = tmp_path / "cl100k_base.tiktoken"
    bad.write_bytes(bytes(data))
    counter = TokenCounter(path=bad)
    text = "the agent pays for its own compute " * 20
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        assert counter.count(text) == estimate_tokens(text)
        assert counter.count("hello world") == estimate_tokens("hello world")
    assert not counter.loaded
    assert "sha256" in counter._failed
    assert len([r for r in caplog.records if r.name == tokens.__name__]) == 1
    with pytest.raises(ValueError):
        load_encoder(bad)


def test_unload_frees_the_encoder_at_once_and_the_next_count_loads_it_again():
    counter = TokenCounter()
    n = counter.count("hello world")
    encoder = weakref.ref(counter._encoder)
    counter.unload()  # as the agent goes to sleep
    assert not counter.loaded and encoder() is None  # no reference cycle left for the collector: freed now
    assert counter.count("hello world") == n and counter.loaded


def test_missing_file_falls_back(tmp_path):
    counter = TokenCounter(path=tmp_path / "absent.tiktoken")
    assert counter.count("hello world") == estimate_tokens("hello world")
    assert "FileNotFoundError" in counter._failed


def test_cache_is_keyed_by_digest_never_the_text():
    counter = TokenCounter(cache_size=3)
    texts = ["my secret seed phrase is alpha bravo", "second text", "third text", "fourth text"]
    for t in texts:
        counter.count(t)
    keys = list(counter._cache)  # oldest first
    assert len(keys) == 3
    for key in keys:
        assert isinstance(key, bytes) and len(key) == 16
        for t in texts:
            assert t.encode() not in key and t not in repr(key)
    assert keys == [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts[1:]]
    counter.count("second text")
    assert list(counter._cache)[-1] == keys[0]  # a hit moves it to the newest end
    assert counter.count("") == 0


def test_estimate_error_bound_on_the_corpus(shipped):
    docs = json.loads(CORPUS.read_text())
    assert {d["kind"] for d in docs} == set(ESTIMATE_ERROR_BOUND)
    worst = {}
    for d in docs:
        exact = len(shipped.encode(d["text"]))
        err = abs(estimate_tokens(d["text"]) - exact) / exact
        worst[d["kind"]] = max(worst.get(d["kind"], 0.0), err)
    for kind, err in worst.items():
        assert err <= ESTIMATE_ERROR_BOUND[kind], (kind, err)
    chars4 = max(abs(len(d["text"]) / 4 - len(shipped.encode(d["text"]))) / len(shipped.encode(d["text"]))
                 for d in docs)
    assert chars4 > max(worst.values())


def test_module_level_api():
    assert tokens.count_tokens("hello world") == 2


def test_safety_margin():
    assert safety_margin("gpt-4") == 0.0
    assert safety_margin("gpt-3.5-turbo") == 0.0
    assert safety_margin("gpt-4o-mini") == 0.10
    assert safety_margin("gemma-3-270m") == 0.10
    assert safety_margin("llama") == 0.10
    assert safety_margin(None) == 0.10
