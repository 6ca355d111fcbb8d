"""The house's shape: imports point down README's floors, no import circle, small modules, short lines."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "automaton_min"
MAX_MODULE_LINES = 500
MAX_LINE_CHARS = 120


def declared_floors(readme: Path) -> tuple[list[str], set[str]]:
    """README's one declaration: the rooms from the top floor down, and the rooms of the ground floor."""
    line = next(text for text in readme.read_text().splitlines() if text.startswith("Floors, top to bottom"))
    upper, _, ground = line.partition("the ground floor")
    return re.findall(r"`([a-z_]+)`", upper), set(re.findall(r"`([a-z_]+)`", ground))


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of the package that ``name`` imports anywhere (at the top, in a function, for type checking)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = (base or "").rstrip(".")
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in known and c != name)
    return found


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_arrows(root: Path, readme: Path) -> set[tuple[str, str]]:
    """(room, room) pairs where a room imports one on a floor above its own."""
    floors, ground = declared_floors(readme)
    rank = {room: i for i, room in enumerate(floors)} | {room: len(floors) for room in ground | {"__init__"}}
    rank["__main__"] = -1
    known = modules(root)
    unplaced = {room_of(m) for m in known} - rank.keys()
    assert not unplaced, f"rooms README's floors do not place: {sorted(unplaced)}"
    arrows = set()
    for name, path in known.items():
        for target in imports_of(name, path, known):
            if rank[room_of(target)] < rank[room_of(name)]:
                arrows.add((room_of(name), room_of(target)))
    return arrows


def circles(root: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan, iteratively)."""
    known = modules(root)
    graph = {name: sorted(imports_of(name, path, known)) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(graph[node]):
                work.append((node, i + 1))
                nxt = graph[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_imports_point_down_readmes_floors() -> None:
    arrows = upward_arrows(ROOT, ROOT / "README.md")
    assert len(arrows) <= 1, f"imports back up the floors: {sorted(arrows)}"


def test_no_import_circle() -> None:
    assert circles(ROOT) == []


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_planted_upward_import_and_a_planted_circle_are_found(copy: Path) -> None:
    before = upward_arrows(copy, ROOT / "README.md")
    kv = copy / PACKAGE / "store" / "kv.py"
    kv.write_text(kv.read_text() + "\n\ndef _planted():\n    from automaton_min.cli import main\n")
    assert upward_arrows(copy, ROOT / "README.md") - before == {("store", "cli")}
    clock = copy / PACKAGE / "clock.py"
    clock.write_text(clock.read_text() + "\nfrom automaton_min.log import get_logger\n")
    assert ["automaton_min.clock", "automaton_min.log"] in circles(copy)


def test_modules_are_small_and_lines_short() -> None:
    long_modules, long_lines = [], []
    for name, path in modules(ROOT).items():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES:
            long_modules.append(f"{name} ({len(lines)})")
        long_lines += [f"{name}:{n}" for n, line in enumerate(lines, 1) if len(line) > MAX_LINE_CHARS]
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_lines, f"{len(long_lines)} lines over {MAX_LINE_CHARS} characters: {long_lines[:20]}"


TIME_SPANS = re.compile(r"^(MINUTE|HOUR|DAY)_MS\s*=|\b(60_000|3_600_000|86_400_000)\b", re.M)


def test_minutes_hours_and_days_in_ms_are_clocks_alone() -> None:
    """The spans of time in milliseconds have one owner, clock.py: no module defines them again or spells them."""
    found = [f"{name}:{text[:match.start()].count(chr(10)) + 1}"
             for name, path in modules(ROOT).items() if name != f"{PACKAGE}.clock"
             for text in [path.read_text()] for match in TIME_SPANS.finditer(text)]
    assert not found, f"a span of time defined or spelled outside clock.py: {found}"
