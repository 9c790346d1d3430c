"""`AsyncClient`'s approvals: approve or deny a call that waits for a person (as `Client`'s, on redis.asyncio)."""

from __future__ import annotations

import time
from typing import Any

from tasks.client import core
from tasks.client.async_base import AsyncBase, reaching
from tasks.client.core import Kind
from tasks.store import keys
from tasks.store.approvals import DECIDE, Decided, Decision, decide_call, decided, waiting_call
from tasks.store.records import UnitRecord
from tasks.store.replies import text_or_none


class AsyncApprovals(AsyncBase):
    @reaching
    async def approve(
        self, ident: str, tool_use_id: str, *, by: str | None = None, kind: Kind | None = None
    ) -> dict[str, Any]:
        """Approve a call that waits for approval; the unit resumes on any worker once all its calls are decided."""
        return await self._decide(ident, tool_use_id, "approved", reason=None, by=by, kind=kind)

    @reaching
    async def deny(
        self,
        ident: str,
        tool_use_id: str,
        reason: str | None = None,
        *,
        by: str | None = None,
        kind: Kind | None = None,
    ) -> dict[str, Any]:
        """Deny a call that waits for approval: it never runs; the model reads `Denied by user[: reason]`."""
        return await self._decide(ident, tool_use_id, "denied", reason=core.check_reason(reason), by=by, kind=kind)

    async def _decide(
        self, ident: str, tool_use_id: str, decision: Decision, *, reason: str | None, by: str | None, kind: Kind | None
    ) -> dict[str, Any]:
        core.check_id(tool_use_id, "tool_use_id")
        by = core.check_by(by)
        owner = await self._owner(ident, kind)
        rec = await self._find_waiting(owner, tool_use_id)
        done: Decided | None = None
        if rec is not None:
            script_keys, args = decide_call(rec, tool_use_id, decision, reason=reason, by=by, now=time.time())
            done = decided(await self._store.eval(DECIDE, len(script_keys), *script_keys, *args), decision)
        answer = core.decision_answer(ident, tool_use_id, done)
        if done is not None and done.resume and rec is not None:
            await self._send(rec)
        return answer

    async def _find_waiting(self, owner: str, tool_use_id: str, *, recent: int = 20) -> UnitRecord | None:
        """`tasks.store.approvals.find_waiting`, on this client's I/O."""
        kind, _, ident = owner.partition(":")
        if kind == "run":
            return await self._record(owner, ident)
        for raw in reversed(await self._store.lrange(keys.turns(owner), -recent, -1)):
            turn_id = text_or_none(raw) or ""
            rec = await self._record(owner, turn_id)
            if rec is None:
                continue
            if waiting_call(rec, tool_use_id) or await self._store.hexists(keys.approvals(owner, turn_id), tool_use_id):
                return rec
        return None
