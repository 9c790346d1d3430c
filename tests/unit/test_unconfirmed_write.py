"""A write tool's write-ahead entry behind Sentinel: confirmed by the master's online replicas (at most the
setting), run unreplicated and said so when there are none, and marked `unconfirmed` when WAIT times out so that
the execution resuming the unit runs the tool exactly once (never answers it as interrupted, never twice).

The Redis journal over fakeredis; the fence's WAIT is simulated (fakeredis has none): the real one is exercised
by tests/integration/test_sentinel.py.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import fakeredis
import pytest

from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig
from agent.loop.policy import Backoff, Driver
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import INTERRUPTED_RESULT, user_text
from agent.provider.scripted import ScriptedProvider, reply_text, reply_tool
from agent.tools import by_name, tool
from tasks.store import journal as journal_module
from tasks.store import keys
from tasks.store.fenced import _FENCED, Batch, Fence, ReplicationUnconfirmed
from tasks.store.journal import RedisJournal

OWNER, TURN = "chat:c1", "t1"
CONFIG = LoopConfig(
    owner_id=OWNER,
    turn_id=TURN,
    driver=Driver.CHAT_TURN,
    model="claude-test",
    max_rounds=5,
    retry_budget=3,
    backoff=Backoff(scale=0.0),
)


class WaitingFence(Fence):
    """A fence whose WAIT answers with the next of `acks` (how many replicas confirmed)."""

    def __init__(self, client: fakeredis.FakeRedis, acks: list[int]) -> None:
        super().__init__(client, keys.lease(OWNER), "token-a")
        self.acks = acks
        self.waited: list[int] = []

    def commit(self, batch: Batch, *, replicas: int = 0, timeout_ms: int = 0, via: Any = None) -> list[Any]:
        replies = super().commit(batch)
        if replicas:
            self.waited.append(replicas)
            acked = self.acks.pop(0)
            if acked < replicas:
                raise ReplicationUnconfirmed(f"{acked} of {replicas} replicas confirmed the write within 1 ms")
        return replies


class Replicas:
    """Stands for `REPLICAS`: the master's online replicas, as the test sets them."""

    def __init__(self, online: int) -> None:
        self.online = online
        self.forgotten = 0

    def count(self, client: object) -> int:
        return self.online

    def forget(self, client: object) -> None:
        self.forgotten += 1


@pytest.fixture
def client() -> fakeredis.FakeRedis:
    r = fakeredis.FakeRedis()
    r.script_load(_FENCED)
    r.set(keys.lease(OWNER), "token-a")
    return r


def _journal(client: fakeredis.FakeRedis, fence: Fence, *, min_replicas: int = 1) -> RedisJournal:
    journal = RedisJournal(client, fence, owner_id=OWNER, unit_id=TURN, generation=0, min_replicas=min_replicas)
    journal.sentinel, journal.master = True, client  # as behind Sentinel (fakeredis has no Sentinel pool)
    return journal


def _stored(client: fakeredis.FakeRedis) -> dict[str, dict[str, Any]]:
    return {k.decode(): json.loads(v) for k, v in client.hgetall(keys.journal(OWNER, TURN, 0)).items()}


def _events(client: fakeredis.FakeRedis) -> list[dict[str, Any]]:
    return [json.loads(fields[b"e"]) for _, fields in client.xrange(keys.events(OWNER))]


class Turn:
    """A chat turn whose model asks for one write (`note`), then answers; counts the tool's runs."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

        @tool(effect="write")
        def note(text: str) -> str:
            """Write a note."""
            self.calls["note"] += 1
            return f"noted {text}"

        self.tools = by_name([note])
        # One provider across executions: each answer is given once, so a step asked twice would show.
        self.provider = ScriptedProvider([reply_tool("note", {"text": "x"}, call_id="c1"), reply_text("done")])

    def run(self, journal: RedisJournal) -> tuple[LoopState, ScriptedProvider]:
        state = LoopState()
        run_loop(
            [user_text("note x", turn_id=TURN)],
            state,
            provider=self.provider,
            tools=self.tools,
            edge=journal,
            cancel=CancelToken(),
            config=CONFIG,
        )
        return state, self.provider


@pytest.mark.parametrize(("online", "minimum", "asked"), [(1, 1, 1), (3, 2, 2), (1, 3, 1)])
def test_the_entry_waits_for_the_online_replicas_at_most_the_setting(client, monkeypatch, online, minimum, asked):
    monkeypatch.setattr(journal_module, "REPLICAS", Replicas(online))
    fence = WaitingFence(client, acks=[asked])
    turn = Turn()
    state, _ = turn.run(_journal(client, fence, min_replicas=minimum))
    assert state.reply == "done" and turn.calls == {"note": 1}
    assert fence.waited == [asked]
    assert "unreplicated" not in _stored(client)["tool:c1"]
    assert not any("unreplicated" in e for e in _events(client))


@pytest.mark.parametrize(("online", "minimum"), [(0, 1), (2, 0)])
def test_with_no_replica_to_wait_for_the_tool_runs_and_its_outcome_says_unreplicated(
    client, monkeypatch, online, minimum
):
    """After a failover (no replica online), or with BATON_REDIS_MIN_REPLICAS=0: no WAIT, the tool runs once,
    and its journaled result, its `tool.result` event and the journal's list say it ran unreplicated."""
    monkeypatch.setattr(journal_module, "REPLICAS", Replicas(online))
    fence = WaitingFence(client, acks=[])
    turn = Turn()
    journal = _journal(client, fence, min_replicas=minimum)
    state, _ = turn.run(journal)
    assert state.reply == "done" and turn.calls == {"note": 1}
    assert fence.waited == []
    assert _stored(client)["tool:c1"]["unreplicated"] is True
    [result] = [e for e in _events(client) if e["type"] == "tool.result"]
    assert result["unreplicated"] is True and result["tool_use_id"] == "c1"
    assert journal.unreplicated() == ["c1"]
    # A journal reopened on the same hash (a resumed execution) still knows it, for the unit's terminal event.
    assert _journal(client, fence).unreplicated() == ["c1"]


def test_an_unconfirmed_entry_stops_the_unit_before_the_tool_and_its_resume_runs_the_tool_once(client, monkeypatch):
    """WAIT confirms nothing twice, then the replica answers: the tool never runs while unconfirmed, the entry
    is marked `unconfirmed` (with its count of waits), and the resumed execution (a new journal on the same
    hash) replays the model step without asking the model again and runs the tool exactly once."""
    replicas = Replicas(1)
    monkeypatch.setattr(journal_module, "REPLICAS", replicas)
    fence = WaitingFence(client, acks=[0, 0, 1])
    turn = Turn()
    for waits in (1, 2):
        with pytest.raises(ReplicationUnconfirmed) as raised:
            turn.run(_journal(client, fence))
        assert (raised.value.step_id, raised.value.name, raised.value.waits) == ("tool:c1", "note", waits)
        assert "the write tool 'note' was not run" in str(raised.value)
        assert turn.calls == {}
        assert _stored(client)["tool:c1"] == {"kind": "tool", "status": "unconfirmed", "name": "note", "waits": waits}
        assert replicas.forgotten == waits  # the count is read anew before the next try
    state, provider = turn.run(_journal(client, fence))
    assert turn.calls == {"note": 1}
    assert state.reply == "done"
    (block,) = state.messages[1].tool_results
    assert block.content == "noted x" and block.content != INTERRUPTED_RESULT
    # Two requests in all three executions: the step that asked for the tool was asked once, then replayed.
    assert len(provider.requests) == 2
    assert _stored(client)["tool:c1"]["status"] == "done"
    assert fence.waited == [1, 1, 1]
