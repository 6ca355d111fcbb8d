"""automaton_min: a small, self-funding AI agent runtime for small devices."""

__version__ = "0.1.0"
