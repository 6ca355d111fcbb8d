"""Fuzz URLs built from parser tricks: whatever ``read_url`` accepts, the HTTP client connects to the host it read.

The URLs are assembled from pieces known to split parsers (a backslash, ``@`` and userinfo, ``#``, ``%2F``,
``%5C``, IPv6 literals, Unicode dots, odd IP spellings, ports) around an allowed host and an attacker's host. The
oracles are the parsers the client really uses: urllib3's ``parse_url`` (what requests prepares a request with)
and ``urllib.parse.urlsplit``."""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st
from urllib3.util import parse_url

from automaton_min.net.url import UnreadableUrl, read_url

ALLOWED = ("conway.tech",)
HOSTS = ["conway.tech", "api.conway.tech", "evil.example", "127.0.0.1", "[::1]", "[0:0::ffff:7f00:1]", "2130706433",
         "0177.0.0.1", "127.1", "0x7f000001", "conway\u3002tech", "conway\uff0etech", "conway\u2024tech", "CONWAY.TECH.",
         "conway.tech.evil.example", "evilconway.tech", "xn--cnway-9ua.tech", "conway%2Etech", "conway.tech%00"]
TRICKS = ["", "\\", "@", "#", "?", "/", "%2F", "%5C", "%40", "%23", ":", ":80", ":443", ":8080", ":0", "\t", " ",
          "\\@", "#@", "/@", "?@", "%2F@", "%5C@", ";", "\u3002", "\uff0e", "user:pass@", ":@"]
SCHEMES = ["http://", "https://", "HTTP://", "http:/", "http:\\\\", "//", "ftp://", "http:///"]

urls = st.builds(lambda scheme, a, trick, b, path: f"{scheme}{a}{trick}{b}{path}",
                 st.sampled_from(SCHEMES), st.sampled_from(HOSTS), st.sampled_from(TRICKS),
                 st.sampled_from(["", *HOSTS]), st.sampled_from(["", "/", "/paid/1", "/a?b=c", "/x#y", "/%2e%2e/"]))
SETTINGS = settings(max_examples=1500, deadline=None)


def client_host(text: str) -> str:
    """The host requests would connect to for ``text``, as urllib3 reads it."""
    host = parse_url(text).host or ""
    return host.strip("[]").lower().rstrip(".")


@SETTINGS
@given(urls | st.text(max_size=60).map(lambda t: "http://" + t))
def test_an_accepted_url_is_read_alike_by_the_client_and_the_standard_library(raw: str) -> None:
    try:
        url = read_url(raw)
    except UnreadableUrl as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert client_host(url.text) == url.host.lower()  # the host the guard and the cool-down see is the one reached
    assert (urlsplit(url.text).hostname or "") == url.host
    assert read_url(url.text) == url
    if url.on(ALLOWED):  # an allowed host is spelled plainly in what the client gets
        assert client_host(url.text) == "conway.tech" or client_host(url.text).endswith(".conway.tech")


def test_the_generator_reaches_both_outcomes() -> None:
    """Not vacuous: tricks are refused, and plain combinations are read."""
    assert read_url("https://api.conway.tech/paid/1").on(ALLOWED)
    for trick in ("\\@", "#@", "%2F@", "%5C@", "user:pass@", "\u3002"):
        try:
            read_url(f"http://127.0.0.1:8080{trick}conway.tech/paid/1")
        except UnreadableUrl:
            continue
        raise AssertionError(f"{trick!r} was read")
