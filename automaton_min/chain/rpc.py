"""A minimal Ethereum JSON-RPC client (``eth_call``, ``eth_chainId``)."""

from __future__ import annotations

import itertools
from typing import Any

from automaton_min.errors import RuntimeFailure
from automaton_min.net.http import HttpError, NetworkError, expect_ok, request

_ids = itertools.count(1)


class RpcError(RuntimeFailure):
    """The node could not be reached, or answered with an error."""


class RpcUnreachable(RpcError):
    """The node did not answer at all (refused, timed out, no route)."""


def rpc_call(url: str, method: str, params: list[Any], timeout: float = 10.0) -> Any:
    """Call ``method`` on the node at ``url``; the ``result`` or ``RpcError``."""
    try:
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
        answer = expect_ok(request("POST", url, json=body, timeout=timeout), f"RPC {method}").json()
    except NetworkError as exc:
        raise RpcUnreachable(str(exc)) from None
    except HttpError as exc:
        raise RpcError(str(exc)) from None
    if not isinstance(answer, dict):
        raise RpcError(f"RPC {method}: {url} answered something that is not a JSON-RPC response")
    if answer.get("error") is not None:
        error = answer["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        raise RpcError(f"RPC {method}: {url} answered an error: {detail}")
    if "result" not in answer:
        raise RpcError(f"RPC {method}: {url} answered without a result")
    return answer["result"]


def eth_call(url: str, to: str, data: bytes, timeout: float = 10.0) -> bytes:
    """Run a read-only contract call at the latest block; the raw return data."""
    result = rpc_call(url, "eth_call", [{"to": to, "data": "0x" + data.hex()}, "latest"], timeout)
    if not isinstance(result, str) or not result.startswith("0x"):
        raise RpcError(f"RPC eth_call: {url} answered a result that is not hex")
    try:
        return bytes.fromhex(result[2:])
    except ValueError:
        raise RpcError(f"RPC eth_call: {url} answered a result that is not hex") from None
