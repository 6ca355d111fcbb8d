"""The spawner's wire format: length-prefixed JSON messages over a UNIX socket pair."""

from __future__ import annotations

import json
import socket
import struct

_HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024 * 1024


class ChannelClosed(ConnectionError):
    """The other end went away."""


def send(sock: socket.socket, message: dict) -> None:
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    sock.sendall(_HEADER.pack(len(body)) + body)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ChannelClosed("the spawner channel closed")
        chunks += chunk
    return bytes(chunks)


def receive(sock: socket.socket) -> dict:
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if size > MAX_MESSAGE:
        raise ChannelClosed(f"message of {size} bytes is over the limit")
    return json.loads(_exactly(sock, size))
