"""Validation rules (priority 100): arguments that cannot be right are refused (``VALIDATION_FAILED``) first.

They hold where a tool's schema is looser, or when the engine is called directly.
"""

from __future__ import annotations

from typing import Any

from automaton_min.agent.policy.types import VALIDATION_FAILED, PolicyEnv, PolicyRequest, Rule, Verdict, deny, tools
from automaton_min.chain.address import is_address
from automaton_min.cron import CronError, parse

PRIORITY = 100

# Which argument of which tool must be an EVM address, and whether it is required (fund_child names a child: its
# verified wallet is the payee, rules_financial.recipient).
ADDRESS_FIELDS: dict[str, tuple[tuple[str, bool], ...]] = {
    "transfer_credits": (("to_address", True),),
    "send_message": (("to_address", True),),
}
# Which argument of which tool is an amount that must be a positive whole number.
AMOUNT_FIELDS: dict[str, tuple[tuple[str, bool], ...]] = {
    "transfer_credits": (("amount_cents", True),),
    "fund_child": (("amount_cents", True),),
    "topup_credits": (("amount_usd", True),),
    "x402_fetch": (("max_payment_cents", False),),
}


def is_whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _address_format(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    for name, required in ADDRESS_FIELDS.get(request.tool, ()):
        value = request.arguments.get(name)
        if value is None and not required:
            continue
        if not isinstance(value, str) or not is_address(value):
            return deny(VALIDATION_FAILED, f"{name} must be a 0x-prefixed 40-hex-digit address")
    return None


def _amounts(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    for name, required in AMOUNT_FIELDS.get(request.tool, ()):
        value = request.arguments.get(name)
        if value is None and not required:
            continue
        if not is_whole_number(value) or value <= 0:
            return deny(VALIDATION_FAILED, f"{name} must be a positive whole number")
    return None


def _port_range(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    port = request.arguments.get("port")
    if not is_whole_number(port) or not 1 <= port <= 65535:
        return deny(VALIDATION_FAILED, "port must be a whole number from 1 to 65535")
    return None


def _cron_expression(request: PolicyRequest, env: PolicyEnv) -> Verdict | None:
    schedule = request.arguments.get("schedule")
    if schedule is None:
        return None  # removing an entry, or keeping its schedule
    try:
        parse(schedule)  # the scheduler's own parser (automaton_min/cron.py)
    except CronError as exc:
        return deny(VALIDATION_FAILED, str(exc))
    return None


def validation_rules() -> list[Rule]:
    return [
        Rule("validate.address_format", PRIORITY, tools(*ADDRESS_FIELDS), _address_format,
             "recipient addresses are EVM addresses (0x + 40 hex digits)"),
        Rule("validate.amount_positive", PRIORITY, tools(*AMOUNT_FIELDS), _amounts,
             "amounts are positive whole numbers"),
        Rule("validate.port_range", PRIORITY, tools("expose_port", "remove_port"), _port_range, "ports are 1-65535"),
        Rule("validate.cron_expression", PRIORITY, tools("modify_heartbeat"), _cron_expression,
             "heartbeat schedules are 5-field cron expressions"),
    ]
