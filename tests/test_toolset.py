"""The tools offered to the model: all of them, or the compact subset per tier with short, lean schemas."""

from __future__ import annotations

from automaton_min.agent.tools.builtin import builtin_tools
from automaton_min.agent.toolset import COMPACT_TOOLS, DANGER, brief, is_compact, offered_tools
from automaton_min.inference.router import tools_text
from automaton_min.memory.tokens import count_tokens

SPECS = [tool.spec for tool in builtin_tools()]


def test_full_mode_offers_every_tool_and_marks_the_dangerous_ones() -> None:
    offered = offered_tools(SPECS, "normal", compact=False)
    assert [t.name for t in offered] == [s.name for s in SPECS]
    transfer = next(t for t in offered if t.name == "transfer_credits")
    assert transfer.description.endswith(DANGER) and transfer.parameters == next(
        s.parameters for s in SPECS if s.name == "transfer_credits")


def test_compact_mode_is_a_fixed_subset_per_tier_with_lean_schemas() -> None:
    for tier, names in COMPACT_TOOLS.items():
        offered = offered_tools(SPECS, tier, compact=True)
        assert {t.name for t in offered} == set(names) & {s.name for s in SPECS}
        assert offered == offered_tools(SPECS, tier, compact=True)  # deterministic: the prefix stays stable
    normal = offered_tools(SPECS, "normal", compact=True)
    assert count_tokens(tools_text(normal)) < 1_000 < count_tokens(tools_text(offered_tools(SPECS, "normal", compact=False)))
    procedure = next(t for t in normal if t.name == "save_procedure")
    assert set(procedure.parameters["properties"]) == {"name", "description", "steps"}  # a property named description stays
    assert "description" not in procedure.parameters["properties"]["name"]
    assert procedure.parameters["required"] == ["name", "description", "steps"]
    assert "maxLength" not in str(procedure.parameters)


def test_brief_takes_the_first_sentence_and_mode_follows_the_window() -> None:
    assert brief("Run a shell command. It runs in the workspace.") == "Run a shell command."
    assert len(brief("word " * 100)) == 100
    assert is_compact({}, 4096) and is_compact({}, 8192) and not is_compact({}, 8193)
    assert is_compact({"contextMode": "compact"}, 128_000) and not is_compact({"contextMode": "full"}, 4096)


def test_compact_mode_does_not_offer_background_jobs_it_offers_no_way_to_stop() -> None:
    compact = {schema.name: schema for schema in offered_tools(SPECS, "normal", compact=True)}
    full = {schema.name: schema for schema in offered_tools(SPECS, "normal", compact=False)}
    assert "stop_job" not in compact and "stop_job" in full
    assert "background" not in compact["exec"].parameters["properties"]
    assert "background" in full["exec"].parameters["properties"]
