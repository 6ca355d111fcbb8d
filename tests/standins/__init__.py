"""Stand-in peers for tests: real servers and a real EVM on 127.0.0.1 (see README.md here)."""
