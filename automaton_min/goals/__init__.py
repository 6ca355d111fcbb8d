"""Goals: what the agent set out to do, planned into tasks, done by itself or its children (README: Goals)."""
