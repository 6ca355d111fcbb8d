"""x402 payment servers on 127.0.0.1 built on the official x402 Python SDK (2.25), settling on LocalChain.

* ``X402Server(chain, pay_to=..., version=2)``: a Flask app behind the SDK's ``payment_middleware``
  (a real protocol-v2 resource server: 402 + ``PAYMENT-REQUIRED`` header, accepts only
  ``PAYMENT-SIGNATURE``, answers ``PAYMENT-RESPONSE``).
* ``X402Server(chain, pay_to=..., version=1)``: the same routes speaking protocol v1 (402 with a JSON
  body ``{x402Version: 1, error, accepts}``, accepts ``X-PAYMENT``, answers ``X-PAYMENT-RESPONSE``).
  The SDK 2.25 has no v1 resource server, so this gate is written here; verification and settlement
  are the SDK's own v1 facilitator (``ExactEvmSchemeV1``).

Both verify and settle through the SDK's ``x402FacilitatorSync`` with the EVM "exact" schemes and a
``LocalChainFacilitatorSigner``: a settled payment is a real ``transferWithAuthorization`` mined on the
LocalChain (balances move; a replayed authorization is refused by the chain).

Routes (both versions):
  GET /paid                     price = ``price_atomic`` (default 10_000 = $0.01)
  GET /pay/<int:usd>/<address>  price = usd * 10**6 to ``pay_to`` (Conway's credit top-up shape);
                                answers {"credits_cents": usd * 100, "amount_usd": usd, "address": ...}
  GET /free                     no payment
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from eth_abi import decode, encode
from eth_utils import to_checksum_address
from flask import Flask, g, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server
from x402 import x402FacilitatorSync, x402ResourceServerSync
from x402.http.middleware.flask import payment_middleware
from x402.http.types import HTTPRequestContext, PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmServerScheme
from x402.mechanisms.evm.exact.v1.facilitator import ExactEvmSchemeV1 as ExactEvmFacilitatorSchemeV1
from x402.mechanisms.evm.types import TransactionReceipt
from x402.schemas import (
    AssetAmount,
    PaymentPayload,
    PaymentPayloadV1,
    PaymentRequirements,
    PaymentRequirementsV1,
    SettleResponse,
    VerifyResponse,
)

from .evm import (
    BASE_NETWORK,
    BASE_NETWORK_V1,
    USDC_DECIMALS,
    USDC_NAME,
    USDC_VERSION,
    LocalChain,
    Reverted,
    normalize_log,
    selector,
)

log = logging.getLogger(__name__)

ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"


# ---------------------------------------------------------------------- the facilitator's chain access


def _canonical_type(item: Mapping[str, Any]) -> str:
    kind = item["type"]
    if kind.startswith("tuple"):
        return "(" + ",".join(_canonical_type(c) for c in item.get("components", [])) + ")" + kind[len("tuple"):]
    return kind


def _function_abi(abi: list[dict[str, Any]], name: str, nargs: int) -> dict[str, Any]:
    for entry in abi:
        if entry.get("type", "function") == "function" and entry.get("name") == name \
                and len(entry.get("inputs", [])) == nargs:
            return entry
    raise ValueError(f"function {name} with {nargs} inputs not in ABI")


def _calldata(abi: list[dict[str, Any]], name: str, args: tuple[Any, ...]) -> tuple[bytes, list[str]]:
    fn = _function_abi(abi, name, len(args))
    in_types = [_canonical_type(i) for i in fn.get("inputs", [])]
    out_types = [_canonical_type(o) for o in fn.get("outputs", [])]
    return selector(f"{name}({','.join(in_types)})") + encode(in_types, list(args)), out_types


class LocalChainFacilitatorSigner:
    """The SDK's ``FacilitatorEvmSigner`` protocol over a ``LocalChain`` (no JSON-RPC in between).

    Reads are ``eth_call``s (a revert raises ``Reverted``, whose text starts "execution reverted: ",
    which the SDK maps to its error codes); writes are transactions from ``address`` (the chain's
    relayer by default), mined at once; a reverting write is mined with status 0, as on a real chain.
    """

    def __init__(self, chain: LocalChain, address: str | None = None) -> None:
        self.chain = chain
        self.address = to_checksum_address(address or chain.relayer)
        self.sent: list[str] = []  # tx hashes this signer broadcast, in order

    def get_addresses(self) -> list[str]:
        return [self.address]

    def get_chain_id(self) -> int:
        return self.chain.chain_id

    def get_code(self, address: str) -> bytes:
        return self.chain.get_code(address)

    def get_balance(self, address: str, token_address: str) -> int:
        if not token_address or int(token_address, 16) == 0:
            return self.chain.eth_balance(address)
        data = selector("balanceOf(address)") + encode(["address"], [to_checksum_address(address)])
        return decode(["uint256"], self.chain.call(token_address, data, sender=self.address))[0]

    def read_contract(self, address: str, abi: list[dict[str, Any]], function_name: str, *args: Any) -> Any:
        data, out_types = _calldata(abi, function_name, args)
        raw = self.chain.call(address, data, sender=self.address)
        if not out_types:
            return None
        if not raw:
            raise ValueError(f"call to {function_name} at {address} returned no data (no contract there?)")
        values = decode(out_types, raw)
        return values[0] if len(values) == 1 else values

    def verify_typed_data(self, address, domain, types, primary_type, message, signature: bytes) -> bool:
        from x402.mechanisms.evm.verify import verify_typed_data_strict

        return verify_typed_data_strict(self, address, domain, types, primary_type, message, signature)

    def write_contract(self, address: str, abi: list[dict[str, Any]], function_name: str, *args: Any,
                       data_suffix: str | None = None) -> str:
        data, _ = _calldata(abi, function_name, args)
        if data_suffix:
            data += bytes.fromhex(data_suffix.removeprefix("0x"))
        return self.send_transaction(address, data)

    def send_transaction(self, to: str, data: bytes) -> str:
        outcome = self.chain.transact(to, data, sender=self.address)
        if not outcome.ok:
            log.info("facilitator tx %s reverted: %s", outcome.tx_hash, outcome.reason)
        self.sent.append(outcome.tx_hash)
        return outcome.tx_hash

    def wait_for_transaction_receipt(self, tx_hash: str) -> TransactionReceipt:
        receipt = self.chain.receipt(tx_hash)
        if receipt is None:
            raise TimeoutError(f"transaction {tx_hash} not found")
        return TransactionReceipt(
            status=1 if receipt["status"] == 1 else 0,
            block_number=receipt["block_number"],
            tx_hash=tx_hash,
            logs=[normalize_log(entry) for entry in receipt["logs"]],
        )


def make_facilitator(chain: LocalChain, signer: LocalChainFacilitatorSigner | None = None) -> x402FacilitatorSync:
    """The SDK's sync facilitator with the EVM exact scheme for v2 (``eip155:<chain id>``) and v1 (``base``)."""
    signer = signer or LocalChainFacilitatorSigner(chain)
    facilitator = x402FacilitatorSync()
    facilitator.register([f"eip155:{chain.chain_id}"], ExactEvmFacilitatorScheme(signer))
    facilitator.register_v1([BASE_NETWORK_V1], ExactEvmFacilitatorSchemeV1(signer))
    return facilitator


def _parse_payment(payment: str | bytes | Mapping[str, Any]) -> PaymentPayload | PaymentPayloadV1:
    if isinstance(payment, (str, bytes)):
        payment = json.loads(base64.b64decode(payment))
    if payment.get("x402Version") == 1:
        return PaymentPayloadV1.model_validate(payment)
    return PaymentPayload.model_validate(payment)


def _parse_requirements(requirements: Mapping[str, Any]) -> PaymentRequirements | PaymentRequirementsV1:
    if "maxAmountRequired" in requirements:
        return PaymentRequirementsV1.model_validate(requirements)
    return PaymentRequirements.model_validate(requirements)


def b64json(obj: Any) -> str:
    """Standard-alphabet, padded base64 of compact JSON: the encoding of every x402 header."""
    return base64.b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode()


def unb64json(value: str) -> Any:
    return json.loads(base64.b64decode(value))


class _RecordingFacilitatorClient:
    """What the resource server talks to: the real facilitator, with a log and fault injection."""

    def __init__(self, facilitator: x402FacilitatorSync) -> None:
        self.facilitator = facilitator
        self.calls: list[dict[str, Any]] = []
        self.settle_faults: list[str] = []
        self.lock = threading.Lock()

    def get_supported(self):
        return self.facilitator.get_supported()

    def verify(self, payload, requirements) -> VerifyResponse:
        result = self.facilitator.verify(payload, requirements)
        self._record("verify", payload, requirements, result)
        return result

    def settle(self, payload, requirements) -> SettleResponse:
        with self.lock:
            fault = self.settle_faults.pop(0) if self.settle_faults else None
        if fault is not None:
            result = SettleResponse(success=False, error_reason=fault, transaction="",
                                    network=str(requirements.network))
        else:
            result = self.facilitator.settle(payload, requirements)
        self._record("settle", payload, requirements, result)
        return result

    def _record(self, kind: str, payload, requirements, result) -> None:
        with self.lock:
            self.calls.append({"kind": kind, "payload": payload.model_dump(by_alias=True, exclude_none=True),
                               "requirements": requirements.model_dump(by_alias=True, exclude_none=True),
                               "result": result.model_dump(by_alias=True, exclude_none=True)})


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:  # no per-request lines on stderr
        pass


class X402Server:
    """A paid HTTP API on 127.0.0.1 (ephemeral port). Use as a context manager or call start()/stop().

    Attributes after start(): ``url`` (no trailing slash), ``facilitator`` (the SDK's
    ``x402FacilitatorSync``), ``signer`` (``LocalChainFacilitatorSigner``), ``facilitator_calls``
    (every verify/settle the resource server made: payload, requirements and result, camelCase) and
    ``served`` (every request that reached a route handler, i.e. was paid or free).
    """

    def __init__(
        self,
        chain: LocalChain,
        *,
        pay_to: str,
        version: int = 2,
        price_atomic: int = 10_000,
        max_timeout_seconds: int = 300,
        description: str = "paid test endpoint",
        host: str = "127.0.0.1",
        port: int = 0,
        signer: LocalChainFacilitatorSigner | None = None,
    ) -> None:
        if version not in (1, 2):
            raise ValueError("version must be 1 or 2")
        self.chain = chain
        self.pay_to = to_checksum_address(pay_to)
        self.version = version
        self.price_atomic = int(price_atomic)
        self.max_timeout_seconds = max_timeout_seconds
        self.description = description
        self.host = host
        self.port = port
        self.signer = signer or LocalChainFacilitatorSigner(chain)
        self.facilitator = make_facilitator(chain, self.signer)
        self.client = _RecordingFacilitatorClient(self.facilitator)
        self.served: list[dict[str, Any]] = []
        self._http_faults: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.app = self._build_app()

    # ------------------------------------------------------------------ the app

    def _extra(self) -> dict[str, str]:
        return {"name": USDC_NAME, "version": USDC_VERSION}

    def _build_app(self) -> Flask:
        app = Flask(f"x402-standin-v{self.version}")

        @app.get("/free")
        def free():
            return jsonify({"ok": True, "paid": False})

        @app.get("/paid")
        def paid():
            return self._serve({"ok": True, "paid": True})

        @app.get("/pay/<int:usd>/<address>")
        def pay(usd: int, address: str):
            return self._serve({"credits_cents": usd * 100, "amount_usd": usd, "address": address})

        if self.version == 2:
            self._install_v2(app)
        else:
            self._install_v1(app)
        inner = app.wsgi_app

        def faults(environ, start_response):
            with self._lock:
                fault = self._http_faults.pop(0) if self._http_faults else None
            if fault is not None:
                status, body = fault
                start_response(f"{status} Stand-in Fault", [("Content-Type", "application/json")])
                return [json.dumps({"error": body}).encode()]
            return inner(environ, start_response)

        app.wsgi_app = faults  # outside the payment middleware
        return app

    def _serve(self, body: dict[str, Any]):
        record = {"path": request.path, "body": body}
        payment = getattr(g, "payment_payload", None)
        if payment is not None:
            record["payment"] = payment.model_dump(by_alias=True, exclude_none=True)
        with self._lock:
            self.served.append(record)
        return jsonify(body)

    def _install_v2(self, app: Flask) -> None:
        server = x402ResourceServerSync(self.client)
        server.register(f"eip155:{self.chain.chain_id}", ExactEvmServerScheme())

        def option(price) -> PaymentOption:
            return PaymentOption(scheme="exact", pay_to=self.pay_to, price=price,
                                 network=f"eip155:{self.chain.chain_id}",
                                 max_timeout_seconds=self.max_timeout_seconds, extra=self._extra())

        def fixed_price(_ctx: HTTPRequestContext) -> AssetAmount:
            return AssetAmount(amount=str(self.price_atomic), asset=self.chain.token, extra=self._extra())

        def topup_price(ctx: HTTPRequestContext) -> AssetAmount:
            usd = int(ctx.path.strip("/").split("/")[1])
            return AssetAmount(amount=str(usd * 10**USDC_DECIMALS), asset=self.chain.token, extra=self._extra())

        routes = {
            "GET /paid": RouteConfig(accepts=option(fixed_price), description=self.description,
                                     mime_type="application/json"),
            "GET /pay/:usd/:address": RouteConfig(accepts=option(topup_price), description="credit top-up",
                                                  mime_type="application/json"),
        }
        payment_middleware(app, routes, server)

    def _install_v1(self, app: Flask) -> None:
        @app.before_request
        def gate():
            try:
                amount = self._v1_amount(request.path)
            except ValueError:
                return None  # /free, or not a route: let Flask answer
            requirements = PaymentRequirementsV1(
                scheme="exact", network=BASE_NETWORK_V1, max_amount_required=str(amount), resource=request.url,
                description=self.description, mime_type="application/json", pay_to=self.pay_to,
                max_timeout_seconds=self.max_timeout_seconds, asset=self.chain.token, extra=self._extra(),
            )
            g.v1_requirements = requirements
            header = request.headers.get("X-PAYMENT")
            if not header:
                return self._v1_402("X-PAYMENT header is required", requirements)
            try:
                payload = PaymentPayloadV1.model_validate(json.loads(base64.b64decode(header, validate=True)))
            except Exception:
                return self._v1_402("Invalid payment header format", requirements)
            verified = self.client.verify(payload, requirements)
            if not verified.is_valid:
                return self._v1_402(verified.invalid_reason or "invalid payment", requirements, payer=verified.payer)
            g.payment_payload = payload
            return None

        @app.after_request
        def settle(response):
            payload = getattr(g, "payment_payload", None)
            requirements = getattr(g, "v1_requirements", None)
            if payload is None or requirements is None or response.status_code >= 400:
                return response
            result = self.client.settle(payload, requirements)
            if not result.success:
                return self._v1_402(result.error_reason or "settlement failed", requirements, payer=result.payer)
            response.headers["X-PAYMENT-RESPONSE"] = b64json({
                "success": True, "errorReason": None, "transaction": result.transaction,
                "network": result.network, "payer": result.payer,
            })
            response.headers["Access-Control-Expose-Headers"] = "X-PAYMENT-RESPONSE"
            return response

    def _v1_amount(self, path: str) -> int:
        parts = path.strip("/").split("/")
        if parts == ["paid"]:
            return self.price_atomic
        if len(parts) == 3 and parts[0] == "pay":
            return int(parts[1]) * 10**USDC_DECIMALS
        raise ValueError(path)

    def _v1_402(self, error: str, requirements: PaymentRequirementsV1, payer: str | None = None):
        body: dict[str, Any] = {"x402Version": 1, "error": error,
                                "accepts": [requirements.model_dump(by_alias=True, exclude_none=True)]}
        if payer:
            body["payer"] = payer
        response = jsonify(body)
        response.status_code = 402
        return response

    # ------------------------------------------------------------------ facilitator access for tests

    @property
    def facilitator_calls(self) -> list[dict[str, Any]]:
        return self.client.calls

    def requirements(self, path: str = "/paid") -> dict[str, Any]:
        """The wire requirements this server asks for at ``path`` (v1 or v2 shape per ``version``)."""
        amount = self._v1_amount(path)
        if self.version == 1:
            return PaymentRequirementsV1(
                scheme="exact", network=BASE_NETWORK_V1, max_amount_required=str(amount), resource=self.url + path,
                description=self.description, mime_type="application/json", pay_to=self.pay_to,
                max_timeout_seconds=self.max_timeout_seconds, asset=self.chain.token, extra=self._extra(),
            ).model_dump(by_alias=True, exclude_none=True)
        return {"scheme": "exact", "network": f"eip155:{self.chain.chain_id}", "asset": self.chain.token,
                "amount": str(amount), "payTo": self.pay_to, "maxTimeoutSeconds": self.max_timeout_seconds,
                "extra": self._extra()}

    def verify(self, payment: str | Mapping[str, Any], requirements: Mapping[str, Any]) -> dict[str, Any]:
        """The SDK facilitator's verify on a payment (base64 header value or decoded dict, v1 or v2) against
        wire requirements; returns the camelCase VerifyResponse (isValid, invalidReason, payer...)."""
        result = self.facilitator.verify(_parse_payment(payment), _parse_requirements(requirements))
        return result.model_dump(by_alias=True, exclude_none=True)

    def settle(self, payment: str | Mapping[str, Any], requirements: Mapping[str, Any]) -> dict[str, Any]:
        """The SDK facilitator's settle (a real transferWithAuthorization on the chain); camelCase SettleResponse."""
        result = self.facilitator.settle(_parse_payment(payment), _parse_requirements(requirements))
        return result.model_dump(by_alias=True, exclude_none=True)

    # ------------------------------------------------------------------ faults

    def fail_next(self, status: int = 500, times: int = 1, message: str = "stand-in failure") -> None:
        """Answer the next ``times`` requests (any route) with ``status`` before any payment logic."""
        with self._lock:
            self._http_faults.extend([(status, message)] * times)

    def fail_next_settle(self, reason: str = "unexpected_settle_error", times: int = 1) -> None:
        """Make the next settle(s) fail with ``reason`` (nothing is sent to the chain)."""
        with self.client.lock:
            self.client.settle_faults.extend([reason] * times)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> X402Server:
        self._server = make_server(self.host, self.port, self.app, threaded=True, request_handler=_QuietHandler)
        self.port = self._server.server_port
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"x402-standin-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> X402Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "BASE_NETWORK",
    "BASE_NETWORK_V1",
    "LocalChainFacilitatorSigner",
    "Reverted",
    "X402Server",
    "b64json",
    "make_facilitator",
    "unb64json",
]
