"""Children: agents this one spawns into Conway sandboxes, funds, talks to and prunes (README: Children)."""
