"""A client's view of the agents the workers publish, read at most every few seconds, and the check of a send's
agent and model against it: the sync and the async form differ only in how they read (the decision is
`client_agent_pick.pick_agent`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio as aioredis

from tasks.client import agent_pick, core
from tasks.client.core import ValidationError
from tasks.store import agents as published
from tasks.store import keys
from tasks.store.agents import Published
from tasks.store.records import UnitRecord


class AgentPicker:
    """What the workers publish, cached for `agent_pick.AGENTS_FRESH_SECONDS`, and a send's agent checked against it."""

    def __init__(self, store: Callable[[], redis.Redis], keep: float) -> None:
        """`store`: the client's store connection, asked at each read (the client's to replace)."""
        self._store, self._keep = store, keep
        self._cache: tuple[float, list[Published]] = (-1e9, [])

    def listed(self, *, fresh: bool = False) -> list[Published]:
        at, listed = self._cache
        if fresh or time.monotonic() - at > agent_pick.AGENTS_FRESH_SECONDS:
            listed = published.read(self._store(), time.time(), self._keep)
            self._cache = (time.monotonic(), listed)
        return listed

    def pick(
        self, owner: str, agent: str | None, model: str | None, last_turn: Callable[[str], UnitRecord | None]
    ) -> core.AgentPick:
        """The caller's agent and model checked (read again once before refusing: a deploy may have just added the
        agent). A model named without an agent must be one the chat's agent allows: its last turn says which."""
        chat_agent = None
        if model is not None and agent is None and owner.startswith("chat:"):
            last = last_turn(owner)
            chat_agent = last.agent if last is not None else None
        try:
            return agent_pick.pick_agent(self.listed(), agent, model, chat_agent)
        except ValidationError:
            return agent_pick.pick_agent(self.listed(fresh=True), agent, model, chat_agent)


class AsyncAgentPicker:
    """`AgentPicker` for the asyncio client."""

    def __init__(self, store: aioredis.Redis, keep: float) -> None:
        self._store, self._keep = store, keep
        self._cache: tuple[float, list[Published]] = (-1e9, [])

    async def listed(self, *, fresh: bool = False) -> list[Published]:
        at, listed = self._cache
        if fresh or time.monotonic() - at > agent_pick.AGENTS_FRESH_SECONDS:
            raw = await self._store.hgetall(keys.AGENTS)
            listed = published.fold(raw, time.time(), self._keep)[0]
            self._cache = (time.monotonic(), listed)
        return listed

    async def pick(
        self,
        owner: str,
        agent: str | None,
        model: str | None,
        last_turn: Callable[[str], Awaitable[UnitRecord | None]],
    ) -> core.AgentPick:
        """As `AgentPicker.pick`."""
        chat_agent = None
        if model is not None and agent is None and owner.startswith("chat:"):
            last = await last_turn(owner)
            chat_agent = last.agent if last is not None else None
        try:
            return agent_pick.pick_agent(await self.listed(), agent, model, chat_agent)
        except ValidationError:
            return agent_pick.pick_agent(await self.listed(fresh=True), agent, model, chat_agent)
