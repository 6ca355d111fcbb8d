"""``automaton-min heartbeat`` as a real process: list, enable/disable, run without a daemon, user mistakes."""

from __future__ import annotations

import orjson

from automaton_min.heartbeat.tasks import DEFAULT_SCHEDULE
from automaton_min.store.db import open_database


def test_list_enable_disable_and_run_here(cli, set_up):
    listed = cli("heartbeat", "list", "--json")
    assert listed.code == 0, listed.stderr
    rows = {r["name"]: r for r in orjson.loads(listed.stdout)}
    assert set(rows) == {d.name for d in DEFAULT_SCHEDULE}
    assert rows["heartbeat_ping"]["cron"] == "*/15 * * * *" and rows["heartbeat_ping"]["nextRunAt"]

    assert cli("heartbeat", "disable", "retention").code == 0
    assert cli("heartbeat", "enable", "retention").stdout.strip() == "retention enabled"
    assert cli("heartbeat", "disable", "health_check").code == 0
    text = cli("heartbeat", "list").stdout
    assert any(line.startswith("health_check") and " off " in line for line in text.splitlines())

    refused = cli("heartbeat", "run", "health_check")
    assert refused.code == 2 and "disabled" in refused.stderr and "Traceback" not in refused.stderr
    cli("heartbeat", "enable", "health_check")
    ran = cli("heartbeat", "run", "health_check")  # no daemon: it runs in this process
    assert ran.code == 0, ran.stderr
    assert ran.stdout.startswith("ran health_check: healthy")
    with open_database(set_up.default_db_path, quick_check=False) as db:
        assert db.scalar("SELECT result FROM heartbeat_history WHERE task_name = 'health_check'") == "success"
        assert db.scalar("SELECT enabled FROM heartbeat_schedule WHERE task_name = 'retention'") == 1


def test_unknown_task_is_one_line_and_exit_2(cli, set_up):
    for args in (("enable", "nope"), ("run", "nope"), ("disable", "nope")):
        result = cli("heartbeat", *args)
        assert result.code == 2
        assert len(result.stderr_lines) == 1 and "no heartbeat task named 'nope'" in result.stderr
