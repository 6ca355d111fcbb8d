"""Running the automaton: bootstrap, status, health checks (and later threads, scheduler, signals)."""
