"""Budgets' pure rules: scopes, periods and their windows, the answer of `c.budget`, and the words of a refusal.

No I/O: both clients and the worker's `Spend` (tasks/store/budgets.py) build their script arguments and read the
scripts' replies through these functions. Money is whole nano-dollars (agent/provider/price.py) in the store.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from agent.agents.definition import NAME_PATTERN
from agent.provider.price import NANOS_PER_USD
from tasks.store import keys
from tasks.store.replies import text

Period = Literal["day", "month", "total"]
PERIODS: tuple[str, ...] = ("day", "month", "total")
_ID = keys.ID_PATTERN.pattern.removeprefix(r"\A").removesuffix(r"\Z")
SCOPE_PATTERN = re.compile(rf"\A(?:all|(?:user|chat|run):{_ID}|agent:{NAME_PATTERN.strip('^$')})\Z")
MAX_USD = 1_000_000.0  # a nano-dollar sum stays an exact integer in Lua's doubles far beyond this


class BudgetError(ValueError):
    """A scope, period or limit `set_budget` cannot take (the clients raise it as their `ValidationError`)."""


def check_scope(scope: object) -> str:
    """`scope` if it names a budget (`user:ID`, `chat:ID`, `run:ID`, `agent:NAME` or `all`), else `BudgetError`."""
    if not isinstance(scope, str) or not SCOPE_PATTERN.match(scope):
        raise BudgetError(f"a budget's scope is user:ID, chat:ID, run:ID, agent:NAME or all; got {scope!r}")
    return scope


def check_limits(usd: float | None, tokens: int | None, period: str) -> tuple[int | None, int | None]:
    """The limits as the store keeps them (nano-dollars, tokens), or `BudgetError` saying what is wrong."""
    if period not in PERIODS:
        raise BudgetError(f"a budget's period is day, month or total; got {period!r}")
    if usd is None and tokens is None:
        raise BudgetError("a budget needs a limit: usd, tokens or both")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 <= usd <= MAX_USD):
        raise BudgetError(f"usd must be a number from 0 to {MAX_USD:g}; got {usd!r}")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        raise BudgetError(f"tokens must be a whole number, 0 or more; got {tokens!r}")
    return (round(usd * NANOS_PER_USD) if usd is not None else None), tokens


def unit_scopes(owner_id: str, user: str | None, agent: str | None) -> list[str]:
    """Every scope whose budget applies to a unit: its user's, its chat's or run's, its agent's, the fleet's."""
    out = [f"user:{user}"] if user else []
    out.append(owner_id)
    if agent:
        out.append(f"agent:{agent}")
    out.append("all")
    return out


def window(period: str, now: datetime) -> str:
    """The id of the window `now` falls in (ISO strings, so a later window sorts after an earlier one)."""
    if period == "day":
        return now.strftime("%Y-%m-%d")
    if period == "month":
        return now.strftime("%Y-%m")
    return "total"


def windows(now: datetime) -> tuple[str, str]:
    """The day's and the month's window ids, as the scripts take them."""
    return window("day", now), window("month", now)


def resets_at(period: str, now: datetime) -> str | None:
    """When the window holding `now` ends (the calendar's, in UTC), or None for a `total` budget."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        end = day + timedelta(days=1)
    elif period == "month":
        first = day.replace(day=1)
        end = first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)
    else:
        return None
    return end.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(raw: dict[str, str], name: str) -> int:
    return int(raw.get(name) or 0)


def _limit(raw: dict[str, str], name: str) -> int | None:
    value = raw.get(name, "")
    return int(value) if value != "" else None


def answer(scope: str, stored: dict[bytes | str, bytes | str] | list[Any], now: datetime) -> dict[str, Any] | None:
    """`c.budget(scope)`'s answer from the budget's hash (a mapping, or a script's flat list), None when unset.
    A window that has ended reads as spent 0: the scripts roll it over lazily, at the next reservation."""
    raw = _flat(stored)
    if not raw:
        return None
    period = raw.get("period", "month")
    current = raw.get("window") == window(period, now)
    usd, tokens = _limit(raw, "usd"), _limit(raw, "tokens")
    return {
        "scope": scope,
        "usd": usd / NANOS_PER_USD if usd is not None else None,
        "tokens": tokens,
        "period": period,
        "spent_usd": _int(raw, "spent_nanos") / NANOS_PER_USD if current else 0.0,
        "spent_tokens": _int(raw, "spent_tokens") if current else 0,
        "reserved_usd": _int(raw, "reserved_nanos") / NANOS_PER_USD,
        "reserved_tokens": _int(raw, "reserved_tokens"),
        "resets_at": resets_at(period, now),
    }


def _flat(stored: dict[bytes | str, bytes | str] | list[Any]) -> dict[str, str]:
    if isinstance(stored, list):
        return {text(stored[i]): text(stored[i + 1]) for i in range(0, len(stored), 2)}
    return {text(k): text(v) for k, v in stored.items()}


def refusal(
    scope: str, unit: str, spent: int, reserved: int, limit: int, asked: int, period: str, now: datetime
) -> str:
    """The `budget_exceeded` failure's message: which budget, and by how much the attempt's worst case passes it."""

    def amount(value: int) -> str:
        return f"${value / NANOS_PER_USD:.6f}" if unit == "usd" else f"{value} tokens"

    resets = resets_at(period, now)
    when = f"; it resets at {resets}" if resets else ""
    return (
        f"budget_exceeded: the budget of {scope} ({amount(limit)} a {period}) would be passed: "
        f"{amount(spent)} spent and {amount(reserved)} reserved, and this attempt may cost up to {amount(asked)}{when}"
    ).replace("a total)", "in total)")
