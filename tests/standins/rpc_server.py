"""A JSON-RPC 2.0 node on 127.0.0.1 backed by a LocalChain (stdlib http.server in a thread).

Answers like geth does where it matters to a client: quantities as 0x-hex without leading zeros,
data as 0x-hex, a reverting ``eth_call`` / ``eth_estimateGas`` as error
``{"code": 3, "message": "execution reverted: <reason>", "data": "0x08c379a0..."}``, an unknown method as
``-32601``, malformed JSON as ``-32700``. Batches (a JSON array) are supported.

Methods: web3_clientVersion, net_version, eth_chainId, eth_blockNumber, eth_call, eth_estimateGas,
eth_getBalance, eth_getCode, eth_getTransactionCount, eth_gasPrice, eth_maxPriorityFeePerGas,
eth_sendRawTransaction, eth_getTransactionReceipt, eth_getBlockByNumber.

Fault injection (``fail``): JSON-RPC error, HTTP 500, a body that is not JSON, or a delay before the
answer (for timeout tests), for the next N requests or until ``clear_faults()``, optionally only for
one method.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from eth_utils import to_checksum_address

from .evm import LocalChain, Reverted, encode_revert_data

FaultMode = Literal["rpc_error", "http_500", "bad_json", "delay"]


def _q(value: int) -> str:
    return hex(int(value))


def _data(value: Any) -> str:
    if value is None:
        return "0x"
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    return value if str(value).startswith("0x") else "0x" + str(value)


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


@dataclass
class Fault:
    mode: FaultMode
    times: int | None  # None: until clear_faults()
    method: str | None
    code: int
    message: str
    delay: float


class RpcServer:
    """Use as ``with RpcServer(chain) as rpc: requests.post(rpc.url, json=...)`` or start()/stop().

    ``requests`` holds every JSON-RPC request object received over HTTP (dicts with method/params/id),
    in order, faulted ones included.
    """

    def __init__(self, chain: LocalChain, host: str = "127.0.0.1", port: int = 0) -> None:
        self.chain = chain
        self.host, self.port = host, port
        self.url = ""
        self.requests: list[dict[str, Any]] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ faults

    def fail(
        self,
        mode: FaultMode = "rpc_error",
        *,
        times: int | None = 1,
        method: str | None = None,
        code: int = -32000,
        message: str = "stand-in failure",
        delay: float = 0.0,
    ) -> None:
        """Make the next ``times`` requests (None: all, until ``clear_faults``) fail.

        rpc_error: HTTP 200 with ``{"error": {"code", "message"}}``; http_500: HTTP 500 with a text body;
        bad_json: HTTP 200 with a body that is not JSON; delay: sleep ``delay`` s, then answer normally.
        ``method`` limits the fault to requests for that method.
        """
        with self._lock:
            self._faults.append(Fault(mode, times, method, code, message, delay))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, methods: list[str]) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method is None or fault.method in methods:
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    # ------------------------------------------------------------------ dispatch

    def handle(self, request: Any) -> Any:
        """One JSON-RPC request object (or a batch list) -> the response object(s)."""
        if isinstance(request, list):
            if not request:
                return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "empty batch"}}
            return [self.handle(item) for item in request]
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid request"}}
        rid = request.get("id")
        params = request.get("params") or []
        handler = getattr(self, "_m_" + request["method"], None)
        if handler is None:
            message = f"the method {request['method']} does not exist/is not available"
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": message}}
        try:
            return {"jsonrpc": "2.0", "id": rid, "result": handler(*params)}
        except RpcError as error:
            body: dict[str, Any] = {"code": error.code, "message": error.message}
            if error.data is not None:
                body["data"] = error.data
            return {"jsonrpc": "2.0", "id": rid, "error": body}
        except (TypeError, ValueError, KeyError) as error:
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"invalid params: {error}"}}

    @staticmethod
    def _block_tag(tag: Any = "latest") -> str | int:
        if tag in (None, "latest", "safe", "finalized"):
            return "latest"
        if tag in ("pending", "earliest"):
            return tag
        if isinstance(tag, str) and tag.startswith("0x"):
            return int(tag, 16)
        if isinstance(tag, dict):  # EIP-1898 {"blockNumber": ...}
            return RpcServer._block_tag(tag.get("blockNumber", "latest"))
        raise ValueError(f"bad block tag {tag!r}")

    @staticmethod
    def _reverted(error: Reverted) -> RpcError:
        return RpcError(3, str(error), encode_revert_data(error.reason) if error.reason else None)

    def _m_web3_clientVersion(self) -> str:
        return "automaton-standin/eth-tester/py-evm"

    def _m_net_version(self) -> str:
        return str(self.chain.chain_id)

    def _m_eth_chainId(self) -> str:
        return _q(self.chain.chain_id)

    def _m_eth_blockNumber(self) -> str:
        return _q(self.chain.block_number())

    def _m_eth_call(self, tx: dict[str, Any], block: Any = "latest", *_overrides: Any) -> str:
        if not tx.get("to"):
            raise RpcError(-32602, "eth_call without 'to' is not supported by this stand-in")
        try:
            out = self.chain.call(tx["to"], tx.get("data") or tx.get("input") or "0x", sender=tx.get("from"),
                                  block=self._block_tag(block))
        except Reverted as error:
            raise self._reverted(error) from None
        return _data(out)

    def _m_eth_estimateGas(self, tx: dict[str, Any], *_block: Any) -> str:
        try:
            return _q(self.chain.estimate_gas(tx.get("to"), tx.get("data") or tx.get("input") or "0x",
                                              sender=tx.get("from"), value=int(tx.get("value", "0x0"), 16)))
        except Reverted as error:
            raise self._reverted(error) from None

    def _m_eth_getBalance(self, address: str, block: Any = "latest") -> str:
        return _q(self.chain.eth_balance(address))

    def _m_eth_getCode(self, address: str, block: Any = "latest") -> str:
        return _data(self.chain.get_code(address))

    def _m_eth_getTransactionCount(self, address: str, block: Any = "latest") -> str:
        return _q(self.chain.get_nonce(address))

    def _m_eth_gasPrice(self) -> str:
        block = self.chain.latest_block()
        return _q(block.get("base_fee_per_gas", 1_000_000_000) + 1_000_000_000)

    def _m_eth_maxPriorityFeePerGas(self) -> str:
        return _q(1_000_000_000)

    def _m_eth_sendRawTransaction(self, raw: str) -> str:
        try:
            return self.chain.send_raw_transaction(raw)
        except Exception as error:  # eth-tester validation errors: bad nonce, chain id, funds...
            raise RpcError(-32000, str(error)) from None

    def _m_eth_getTransactionReceipt(self, tx_hash: str) -> dict[str, Any] | None:
        receipt = self.chain.receipt(tx_hash)
        if receipt is None:
            return None
        block = self.chain.tester.get_block_by_number(receipt["block_number"])
        return {
            "transactionHash": receipt["transaction_hash"],
            "transactionIndex": _q(receipt["transaction_index"]),
            "blockHash": receipt["block_hash"],
            "blockNumber": _q(receipt["block_number"]),
            "from": to_checksum_address(receipt["from"]),
            "to": to_checksum_address(receipt["to"]) if receipt.get("to") else None,
            "cumulativeGasUsed": _q(receipt["cumulative_gas_used"]),
            "gasUsed": _q(receipt["gas_used"]),
            "effectiveGasPrice": _q(receipt.get("effective_gas_price", 0)),
            "contractAddress": receipt.get("contract_address"),
            "logs": [
                {
                    "address": to_checksum_address(log["address"]),
                    "topics": [_data(t) for t in log["topics"]],
                    "data": _data(log["data"]),
                    "blockNumber": _q(receipt["block_number"]),
                    "blockHash": receipt["block_hash"],
                    "transactionHash": receipt["transaction_hash"],
                    "transactionIndex": _q(receipt["transaction_index"]),
                    "logIndex": _q(log.get("log_index", i)),
                    "removed": False,
                }
                for i, log in enumerate(receipt["logs"])
            ],
            "logsBloom": "0x" + "00" * 256,
            "status": _q(receipt["status"]),
            "type": receipt.get("type", "0x2"),
            "timestamp": _q(block["timestamp"]),
        }

    def _m_eth_getBlockByNumber(self, tag: Any = "latest", full: bool = False) -> dict[str, Any] | None:
        with self.chain.lock:
            try:
                block = self.chain.tester.get_block_by_number(self._block_tag(tag))
            except Exception:
                return None
        txs = block["transactions"]
        return {
            "number": _q(block["number"]),
            "hash": block["hash"],
            "parentHash": block["parent_hash"],
            "nonce": block["nonce"],
            "sha3Uncles": block["sha3_uncles"],
            "logsBloom": "0x" + "00" * 256,
            "transactionsRoot": block["transactions_root"],
            "stateRoot": block["state_root"],
            "receiptsRoot": block["receipts_root"],
            "miner": block["coinbase"],
            "difficulty": _q(block["difficulty"]),
            "totalDifficulty": _q(block.get("total_difficulty", 0)),
            "extraData": block["extra_data"],
            "size": _q(block["size"]),
            "gasLimit": _q(block["gas_limit"]),
            "gasUsed": _q(block["gas_used"]),
            "timestamp": _q(block["timestamp"]),
            "mixHash": block["mix_hash"],
            "baseFeePerGas": _q(block.get("base_fee_per_gas", 0)),
            "transactions": [t if isinstance(t, str) else t["hash"] for t in txs] if not full else
                            [t if isinstance(t, str) else {k: (_q(v) if isinstance(v, int) else v)
                                                            for k, v in t.items()} for t in txs],
            "uncles": [],
        }

    # ------------------------------------------------------------------ HTTP

    def _make_handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(405, b'{"error":"use POST"}')

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    request = json.loads(raw)
                except ValueError:
                    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
                    self._send(200, json.dumps(body).encode())
                    return
                items = request if isinstance(request, list) else [request]
                with server._lock:
                    server.requests.extend(i for i in items if isinstance(i, dict))
                methods = [i.get("method") for i in items if isinstance(i, dict)]
                fault = server._take_fault(methods)
                if fault is not None:
                    if fault.mode == "delay":
                        time.sleep(fault.delay)
                    elif fault.mode == "http_500":
                        self._send(500, f"500 Internal Server Error: {fault.message}".encode(), "text/plain")
                        return
                    elif fault.mode == "bad_json":
                        self._send(200, b"<html>not json</html>", "text/html")
                        return
                    elif fault.mode == "rpc_error":
                        errors = [{"jsonrpc": "2.0", "id": i.get("id") if isinstance(i, dict) else None,
                                   "error": {"code": fault.code, "message": fault.message}} for i in items]
                        self._send(200, json.dumps(errors if isinstance(request, list) else errors[0]).encode())
                        return
                self._send(200, json.dumps(server.handle(request)).encode())

        return Handler

    def start(self) -> RpcServer:
        self._httpd = ThreadingHTTPServer((self.host, self.port), self._make_handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"rpc-standin-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> RpcServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
