"""The agent's memory: stores, token counting, context assembly."""
