"""The ``automaton-min`` command line: parse, call one function below, render."""
