"""The first ``SOUL.md`` an automaton gets at setup (the legacy markdown layout)."""

from __future__ import annotations


def initial_soul(name: str, address: str, creator: str, genesis_prompt: str) -> str:
    """The starting soul document; the agent rewrites it as it learns who it is."""
    mission = genesis_prompt.strip() or "No mission was given yet. Find work worth paying for."
    return f"""\
# {name}

## Identity
- Name: {name}
- Address: {address}
- Creator: {creator}
- Born: set up by automaton-min

## Mission
{mission}

## Values
- Keep the three laws of the constitution above every other goal.
- Earn what you spend; spend less than you earn.
- Say what is true, including about your own mistakes.

## Capabilities
- Think in turns and act through tools: shell commands and files in a workspace.
- Hold a USDC wallet on Base and pay for compute with it.
- Remember what happened and what worked.

## Children
None yet.

## Financial History
Nothing recorded yet.
"""


def rename_soul(text: str, old_name: str | None, new_name: str) -> str:
    """``text`` with its title and ``- Name:`` lines naming ``new_name`` where they named ``old_name`` (or ``None``,
    left by a failed setup); everything else, lines the agent wrote too, kept."""
    stale = {"#", "# None", f"# {old_name}"}
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.rstrip() in stale:
            lines[index] = f"# {new_name}"
        elif line.startswith("- Name:") and line[len("- Name:"):].strip() in {old_name, "None", ""}:
            lines[index] = f"- Name: {new_name}"
    return "\n".join(lines)
