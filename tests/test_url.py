"""One reading of a URL (net/url.py): what the allow-list, the guard, the cool-down and the client all use."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from automaton_min.net.url import UnreadableUrl, read_url

READ = {
    "https://api.conway.tech/v1/x?a=1": ("https", "api.conway.tech", None, "/v1/x?a=1", "https://api.conway.tech/v1/x?a=1"),
    "http://127.0.0.1:8080": ("http", "127.0.0.1", 8080, "/", "http://127.0.0.1:8080/"),
    "HTTPS://API.Conway.Tech./x": ("https", "api.conway.tech", None, "/x", "https://api.conway.tech/x"),
    "http://[0:0::1]:9/p": ("http", "::1", 9, "/p", "http://[::1]:9/p"),
    "http://conway.tech/a%2Fb": ("http", "conway.tech", None, "/a%2Fb", "http://conway.tech/a%2Fb"),
}

# Parser tricks: each is read one way by one library and another way by another, or spells a host oddly.
REFUSED = [
    "http://127.0.0.1:8080\\@conway.tech/paid", "http://conway.tech\\.evil.example/", "http://evil.example\\conway.tech",
    "http://user@conway.tech/", "http://conway.tech:80@evil.example/", "http://evil.example#@conway.tech/",
    "http://conway.tech/#frag", "http://conway%2Etech/", "http://evil.example%2F@conway.tech/",
    "http://evil.example%5C@conway.tech/", "http://conway\u3002tech/", "http://conway\uff0etech/",
    "http://2130706433/", "http://0177.0.0.1/", "http://0x7f.0.0.1/", "http://127.1/", "http://0x7f000001/",
    "http://01.2.3.4/", "http://conway.tech :80/", "http://conway.tech\t/", "http://conway.tech/\n",
    " http://conway.tech/", "ftp://conway.tech/", "file:///etc/passwd", "http://", "http://:80/",
    "http://conway.tech:/", "http://conway.tech:0/", "http://conway.tech:65536/", "http://conway.tech:08/",
    "http://[::1/", "http://[zz::1]/", "http://-bad-.tech/", "http://conway..tech/", "http://con way.tech/",
    "http://conway.tech/caf\u00e9", "",
]


@pytest.mark.parametrize("raw", sorted(READ))
def test_a_plain_url_is_read_once_and_rebuilt_the_same_way(raw: str) -> None:
    url = read_url(raw)
    assert (url.scheme, url.host, url.port, url.path, url.text) == READ[raw]
    again = urlsplit(url.text)  # what the HTTP client will parse: the same host
    assert (again.hostname, again.port) == (url.host, url.port)
    assert read_url(url.text) == url


@pytest.mark.parametrize("raw", REFUSED)
def test_a_url_read_two_ways_is_refused_with_one_line(raw: str) -> None:
    with pytest.raises(UnreadableUrl) as refused:
        read_url(raw)
    assert "\n" not in str(refused.value) and str(refused.value)


def test_the_allow_list_matches_hosts_and_subdomains_only() -> None:
    assert read_url("https://api.conway.tech/").on(["conway.tech"])
    assert read_url("https://conway.tech/").on(["conway.tech."])
    assert not read_url("https://evilconway.tech/").on(["conway.tech"])
    assert not read_url("https://conway.tech.evil.example/").on(["conway.tech"])
