"""The clients' budgets: `set_budget`, `budget` and `clear_budget`, for `Client` and (as coroutines) `AsyncClient`.

Both build the same script arguments and read the same replies through tasks/store/budget_rules.py; only the I/O
differs (see the README's "Budgets" and tasks/store/budgets.py for what a budget holds).
"""

from __future__ import annotations

from typing import Any

import redis

from config.settings import Settings
from tasks.client.async_base import AsyncBase, reaching
from tasks.client.core import NotFound, ValidationError
from tasks.reach import STORE_ERRORS, Unavailable
from tasks.store import budget_marks, budget_rules, budgets, keys


def _checked(scope: str) -> str:
    try:
        return budget_rules.check_scope(scope)
    except budget_rules.BudgetError as err:
        raise ValidationError(str(err)) from None


def _set_args(scope: str, usd: float | None, tokens: int | None, period: str) -> tuple[list[str], Any]:
    now = budgets.now_utc()
    try:
        return budgets.set_args(_checked(scope), usd, tokens, period, now), now
    except budget_rules.BudgetError as err:
        raise ValidationError(str(err)) from None


def _found(scope: str, answer: dict[str, Any] | None) -> dict[str, Any]:
    if answer is None:
        raise NotFound(f"no budget is set for {scope}")
    return answer


class Budgets:
    """`Client`'s budgets (it provides `redis` and `settings`)."""

    redis: redis.Redis
    settings: Settings

    def set_budget(
        self, scope: str, usd: float | None = None, tokens: int | None = None, period: str = "month"
    ) -> dict[str, Any]:
        """Set (or change) the budget of `scope`: `usd` and/or `tokens` a `period` (day, month: calendar UTC;
        total). What it spent and holds so far stays. Returns the budget as `budget(scope)` answers it."""
        args, now = _set_args(scope, usd, tokens, period)
        try:
            budget_marks.mark_all(self.redis)  # before the budget: see tasks/store/budget_marks.py
            raw = self.redis.eval(budgets.SET, 1, keys.budget(scope), *args)
        except STORE_ERRORS as err:
            raise Unavailable("store", self.settings, err) from err
        return _found(scope, budget_rules.answer(scope, raw, now))

    def budget(self, scope: str) -> dict[str, Any]:
        """`{"scope", "usd", "tokens", "period", "spent_usd", "spent_tokens", "reserved_usd", "reserved_tokens",
        "resets_at"}`; `NotFound` when `scope` has no budget."""
        try:
            raw = self.redis.hgetall(keys.budget(_checked(scope)))
        except STORE_ERRORS as err:
            raise Unavailable("store", self.settings, err) from err
        return _found(scope, budget_rules.answer(scope, raw, budgets.now_utc()))

    def clear_budget(self, scope: str) -> dict[str, Any]:
        """Remove the budget of `scope`: `{"scope", "cleared"}` (False: it had none)."""
        try:
            cleared = bool(self.redis.delete(keys.budget(_checked(scope))))
        except STORE_ERRORS as err:
            raise Unavailable("store", self.settings, err) from err
        return {"scope": scope, "cleared": cleared}


class AsyncBudgets(AsyncBase):
    """`AsyncClient`'s budgets: the same as `Budgets`, as coroutines."""

    @reaching
    async def set_budget(
        self, scope: str, usd: float | None = None, tokens: int | None = None, period: str = "month"
    ) -> dict[str, Any]:
        """As `Client.set_budget`."""
        args, now = _set_args(scope, usd, tokens, period)
        await budget_marks.mark_all_async(self._store)
        raw = await self._store.eval(budgets.SET, 1, keys.budget(scope), *args)
        return _found(scope, budget_rules.answer(scope, raw, now))

    @reaching
    async def budget(self, scope: str) -> dict[str, Any]:
        """As `Client.budget`."""
        raw = await self._store.hgetall(keys.budget(_checked(scope)))
        return _found(scope, budget_rules.answer(scope, raw, budgets.now_utc()))

    @reaching
    async def clear_budget(self, scope: str) -> dict[str, Any]:
        """As `Client.clear_budget`."""
        return {"scope": scope, "cleared": bool(await self._store.delete(keys.budget(_checked(scope))))}
