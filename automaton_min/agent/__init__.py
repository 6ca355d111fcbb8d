"""The agent: its states, its loop, its tools and its policy."""
