"""Writes tests/data/token_corpus.json, the fixed texts the token estimate's error bound is measured on.

Run once from the repository root; the JSON is committed, so the corpus does not change with the sources it
was cut from. Kinds: prose and tables (README), code (the package's own sources), JSON tool results, shell
output, hex (addresses, hashes), other languages, base64.
"""

import base64
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def chunks(text: str, rng: random.Random, lo: int, hi: int) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.randint(lo, hi)
        out.append(text[i:i + n])
        i += n
    return [c for c in out if c.strip()]


def main() -> None:
    rng = random.Random(10)
    docs: list[dict] = []
    readme = (ROOT / "README.md").read_text()
    for c in chunks(readme, rng, 300, 3000)[:40]:
        docs.append({"kind": "readme", "text": c})
    for name in ["agent/loop.py", "agent/prompts.py", "treasury/guard.py", "config.py"]:
        src = (ROOT / "automaton_min" / name).read_text()
        for c in chunks(src, rng, 300, 3000)[:8]:
            docs.append({"kind": "code", "text": c})
    for _ in range(20):
        result = {
            "ok": True,
            "balanceCents": rng.randint(0, 10**6),
            "address": "0x" + rng.randbytes(20).hex(),
            "txHash": "0x" + rng.randbytes(32).hex(),
            "createdAt": f"2026-11-{rng.randint(10, 28)}T{rng.randint(10, 23)}:{rng.randint(10, 59)}:30.250Z",
            "items": [{"id": f"mem_{rng.randbytes(6).hex()}", "score": round(rng.random(), 4),
                       "text": rng.choice(["paid for credits", "creator said hello", "sandbox restarted"])}
                      for _ in range(rng.randint(1, 8))],
        }
        docs.append({"kind": "json", "text": json.dumps(result, indent=rng.choice([None, 2]))})
    for _ in range(10):
        lines = []
        for _ in range(rng.randint(5, 40)):
            lines.append(f"-rw-r--r-- 1 agent agent {rng.randint(0, 10**7):>9} Nov {rng.randint(1, 30):>2} "
                         f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02} file_{rng.randbytes(3).hex()}.log")
        docs.append({"kind": "shell", "text": "\n".join(lines)})
    for _ in range(10):
        docs.append({"kind": "hex", "text": " ".join("0x" + rng.randbytes(rng.choice([20, 32])).hex()
                                                     for _ in range(rng.randint(1, 12)))})
    for _ in range(5):
        docs.append({"kind": "base64", "text": base64.b64encode(rng.randbytes(rng.randint(100, 1500))).decode()})
    docs += [{"kind": "lang", "text": t} for t in [
        "Der Agent bezahlt seine Rechenzeit selbst und schreibt jeden Zug in die Datenbank, bevor er weitermacht.",
        "L'agent paie lui-même son temps de calcul ; chaque paiement signé compte comme dépensé jusqu'à ce que "
        "la chaîne dise le contraire.",
        "El agente se despierta con un evento, lee su bandeja de entrada y decide qué hacer a continuación.",
        "代理程序自己支付计算费用，并在每一轮结束后把记录写入数据库。它会定期检查余额。",
        "エージェントは自分の計算資源の代金を支払い、各ターンの記録をデータベースに書き込みます。",
        "Агент сам оплачивает вычисления и записывает каждый ход в базу данных.",
        "에이전트는 스스로 컴퓨팅 비용을 지불하고 매 턴을 데이터베이스에 기록합니다.",
        "Status: ok ✅ balance low ⚠️ — top up soon 🚀🚀 (credits: 12.50 $)",
    ]]
    out = ROOT / "tests" / "data" / "token_corpus.json"
    out.write_text(json.dumps(docs, ensure_ascii=False, indent=0) + "\n")
    print(f"{len(docs)} documents, {sum(len(d['text']) for d in docs)} characters -> {out}")


if __name__ == "__main__":
    main()
