"""USDC balance over JSON-RPC: the exact eth_call, and every failure is an error (never a zero balance)."""

from __future__ import annotations

import orjson
import pytest

from automaton_min.chain.rpc import RpcError
from automaton_min.chain.usdc import BASE, BASE_SEPOLIA, format_usdc, network_named, usdc_balance
from automaton_min.home import Home
from standins.loopback_http import LoopbackServer, Reply, Request

OWNER = "0x1a642f0E3c3aF545E7AcBD38b07251B3990914F1"


def json_rpc(answer, chain_id: int = 8453) -> LoopbackServer:
    """A JSON-RPC peer on ``chain_id`` whose eth_call answers ``answer(request_json)`` (a JSON-RPC body or a Reply)."""
    def handle(request: Request) -> Reply:
        body = request.json()
        if body["method"] == "eth_chainId":
            return Reply(200, {"jsonrpc": "2.0", "id": body["id"], "result": hex(chain_id)})
        reply = answer(body)
        return reply if isinstance(reply, Reply) else Reply(200, reply)
    return LoopbackServer({("POST", "/"): handle})


def balance_answer(atomic: int):
    def answer(body: dict) -> dict:
        return {"jsonrpc": "2.0", "id": body["id"], "result": "0x" + atomic.to_bytes(32, "big").hex()}
    return answer


def test_balance_of_is_the_exact_eth_call() -> None:
    with json_rpc(balance_answer(12_345_678)) as server:
        assert usdc_balance(server.url + "/", OWNER, BASE) == 12_345_678
        body = server.requests[-1].json()
    assert [r.json()["method"] for r in server.requests] == ["eth_chainId", "eth_call"]
    call, block = body["params"]
    assert block == "latest"
    assert call["to"] == BASE.usdc
    assert call["data"] == "0x70a08231" + "0" * 24 + OWNER[2:].lower()


def test_base_sepolia_reads_its_own_contract() -> None:
    with json_rpc(balance_answer(1), chain_id=84532) as server:
        usdc_balance(server.url + "/", OWNER, BASE_SEPOLIA)
        assert server.requests[-1].json()["params"][0]["to"] == BASE_SEPOLIA.usdc


def test_a_node_on_another_chain_is_refused_not_read() -> None:
    with json_rpc(balance_answer(5), chain_id=1) as server:
        with pytest.raises(RpcError, match="serves chain 1, not eip155:8453"):
            usdc_balance(server.url + "/", OWNER, BASE)
        assert [r.json()["method"] for r in server.requests] == ["eth_chainId"]


@pytest.mark.parametrize(("answer", "problem"), [
    (lambda b: {"jsonrpc": "2.0", "id": b["id"], "error": {"code": -32000, "message": "execution reverted"}}, "execution reverted"),
    (lambda b: Reply(500, "upstream down"), "500"),
    (lambda b: Reply(200, "<html>gateway</html>"), "not JSON"),
    (lambda b: {"jsonrpc": "2.0", "id": b["id"], "result": "0x"}, "expected 32 bytes"),
    (lambda b: {"jsonrpc": "2.0", "id": b["id"], "result": "zz"}, "not hex"),
    (lambda b: {"jsonrpc": "2.0", "id": b["id"]}, "without a result"),
])
def test_every_rpc_failure_is_an_error_not_zero(answer, problem: str) -> None:
    with json_rpc(answer) as server, pytest.raises(RpcError, match=problem):
        usdc_balance(server.url + "/", OWNER, BASE)


def test_an_unreachable_node_is_an_error() -> None:
    with pytest.raises(RpcError, match="failed"):
        usdc_balance("http://127.0.0.1:9/", OWNER, BASE, timeout=2)


def test_formatting_and_network_names() -> None:
    assert format_usdc(5_000_000) == "5.000000"
    assert format_usdc(1) == "0.000001"
    assert network_named("base") is BASE and network_named("eip155:84532") is BASE_SEPOLIA
    assert network_named("solana") is None


def test_wallet_command_shows_the_balance(cli, set_up: Home) -> None:
    with json_rpc(balance_answer(7_250_000)) as server:
        result = cli("wallet", "--json", env={"AUTOMATON_RPC_URL": server.url + "/"})
    assert result.code == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["usdc"] == "7.250000" and report["usdcAtomic"] == 7_250_000
    assert report["address"] == orjson.loads(set_up.config_path.read_bytes())["walletAddress"]


def test_wallet_command_with_a_failing_node_says_so_in_one_line(cli, set_up: Home) -> None:
    with json_rpc(lambda b: Reply(503, "busy")) as server:
        result = cli("wallet", env={"AUTOMATON_RPC_URL": server.url + "/"})
    assert result.code == 1
    assert result.stderr_lines == [line for line in result.stderr_lines if line.startswith("Error:")] and len(result.stderr_lines) == 1
    assert "503" in result.stderr and "0.000000" not in result.stdout


def test_wallet_command_reads_base_sepolia_on_request(cli, set_up: Home) -> None:
    with json_rpc(balance_answer(42), chain_id=84532) as server:
        result = cli("wallet", "--network", "base-sepolia", "--json", env={"AUTOMATON_RPC_URL": server.url + "/"})
        called = server.requests[-1].json()["params"][0]["to"]
    assert result.code == 0, result.stderr
    assert orjson.loads(result.stdout)["network"] == "eip155:84532" and called == BASE_SEPOLIA.usdc
