"""automaton_min: a small, self-funding AI agent runtime for small devices."""

import sys

__version__ = "0.1.0"
if getattr(sys, "frozen", False):  # the one-file binary: the version build/build.sh baked in
    from automaton_min_build import VERSION as __version__  # noqa: E402,F401
