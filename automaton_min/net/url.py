"""One reading of a URL, so the allow-list, the payment guard, the cool-down and the HTTP client see the same host
(README: Payments). An oddly spelt IP address includes hex (``0x7f.1``) and fewer than four parts; IPv6 literals are
kept, in their canonical spelling.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from automaton_min.errors import UserError

_HOST_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnreadableUrl(UserError):
    """A URL that cannot be read one way only."""


@dataclass(frozen=True)
class Url:
    """A URL as read once: ``text`` is what the HTTP client gets, rebuilt from the parts."""

    scheme: str
    host: str  # lower case, no trailing dot; an IPv6 address without brackets
    port: int | None
    path: str  # with the query, if any
    text: str

    def on(self, domains: tuple[str, ...] | list[str]) -> bool:
        """The host is one of ``domains`` or below one of them."""
        return any(within(self.host, domain) for domain in domains if domain)


def within(host: str, domain: str) -> bool:
    """``host`` is ``domain`` or below it (case and a trailing dot aside)."""
    domain = domain.lower().rstrip(".")
    host = host.lower().rstrip(".")
    return host == domain or host.endswith("." + domain)


def read_url(raw: str) -> Url:
    """``raw`` read once, or ``UnreadableUrl`` naming what makes it ambiguous."""
    if not isinstance(raw, str) or not raw:
        raise UnreadableUrl("the URL is empty")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in raw):
        raise UnreadableUrl("the URL holds whitespace or control characters")
    if "\\" in raw:
        raise UnreadableUrl("the URL holds a backslash, which parsers read in different ways")
    if not raw.isascii():
        raise UnreadableUrl("the URL holds characters outside ASCII; percent-encode the path, spell the host in ASCII")
    try:
        parts = urlsplit(raw)
    except ValueError as exc:  # an unclosed or invalid [IPv6] literal
        raise UnreadableUrl(f"the URL cannot be read: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise UnreadableUrl(f"only http and https URLs are fetched, not {parts.scheme or 'this'}")
    if "#" in raw:
        raise UnreadableUrl("the URL has a fragment (#...); leave it out")
    netloc = parts.netloc
    if "@" in netloc:
        raise UnreadableUrl("the URL carries user information (user@host); credentials go in headers")
    if "%" in netloc:
        raise UnreadableUrl("the URL's host is percent-encoded")
    host, port = _host_and_port(netloc)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    shown = f"[{host}]" if ":" in host else host
    text = f"{parts.scheme}://{shown}{f':{port}' if port is not None else ''}{path}"
    return Url(parts.scheme, host, port, path, text)


def _host_and_port(netloc: str) -> tuple[str, int | None]:
    if netloc.startswith("["):
        literal, _, rest = netloc[1:].partition("]")
        try:
            host = ipaddress.IPv6Address(literal).compressed
        except ValueError:
            raise UnreadableUrl(f"{literal!r} is not an IPv6 address") from None
        return host, _port(rest.removeprefix(":")) if rest else None
    host, colon, port_text = netloc.rpartition(":") if ":" in netloc else (netloc, "", "")
    if colon and not port_text:
        raise UnreadableUrl("the URL has a ':' without a port")
    host = host.lower().removesuffix(".")
    labels = host.split(".")
    if not host or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise UnreadableUrl(f"{host!r} is not a host name")
    if all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        try:
            canonical = str(ipaddress.IPv4Address(host))
        except ValueError:
            canonical = None
        if canonical != host:
            raise UnreadableUrl(f"{host!r} spells an IP address oddly; write it as four decimal parts")
    return host, _port(port_text) if colon else None


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536 or (len(text) > 1 and text.startswith("0")):
        raise UnreadableUrl(f"{text!r} is not a port")
    return int(text)
