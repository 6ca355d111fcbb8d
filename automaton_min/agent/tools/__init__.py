"""Tools: the registry, argument validation, and one module per tool family."""
