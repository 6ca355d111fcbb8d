"""Crash consistency: SIGKILL the real ``automaton-min run`` at chosen points and at random moments, restart it,
and check ``state.db`` after every kill (see ``harness.py`` for the invariants).

Bounded for CI: the chosen points once each, a few reached again later, and random moments from a seeded RNG;
at least 10 kills in well under a minute. The payment points (``intent_stored``, ``payment_signed``,
``payment_answered``) and ``message_sent`` are not reached offline here; their invariants are still checked.
"""

from __future__ import annotations

import random

from conftest import CREATOR, keep_offline
from crash.harness import Harness, busy_answer
from standins.model_servers import OpenAIServer

POINTS = ("before_turn_commit", "turn_committed", "turn_committed:3", "before_turn_commit:2", "turn_committed:2")
RANDOM_KILLS = 5
SEED = 12


def test_killed_run_restarts_consistent(cli, home) -> None:
    with OpenAIServer(mode="llamacpp") as model:
        model.script(*[busy_answer()] * 2000)
        setup = cli("setup", "--name", "ada", "--genesis-prompt", "Keep notes.", "--creator-address", CREATOR,
                    "--openai-base-url", model.url, "--inference-model", "scripted-model", "--yes")
        assert setup.code == 0, setup.stderr
        keep_offline(home)
        harness = Harness(home.root)
        harness.clean_run(turns=1)  # creates state.db and the schedule
        rng = random.Random(SEED)
        for point in POINTS:
            harness.add_messages(3)
            harness.crash_at(point)
        harness.crash_in_heartbeat()
        harness.clean_run(turns=1)  # the lease the killed process held is taken again
        harness.crash_in_heartbeat("retention")
        for _ in range(RANDOM_KILLS):
            harness.add_messages(2)
            harness.kill_after(rng.uniform(0.8, 2.5))
        harness.add_messages(2)
        harness.clean_run(turns=3)

    assert harness.failures == []
    assert harness.kills >= 10
    assert harness.points.count("heartbeat_task") == 2 and harness.leases_recovered == 2
    assert len(harness.points) == len(POINTS) + 2
    processed = harness.count("SELECT COUNT(*) FROM inbox_messages WHERE status = 'processed'")
    assert processed >= len(harness.messages) // 2  # the turns did read the messages (checked exactly once above)
    assert model.rejections == []
