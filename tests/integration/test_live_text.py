"""Live text from real workers: deltas in the unit's stream, discarded attempts before their discard, any fault.

Each test folds the stream the way a client must (drop every discarded attempt) and compares the result with
the transcript: the text a watcher saw equals the text the unit kept, whatever broke in between.
"""

from __future__ import annotations

import pytest
import redis

from tasks.store import indexes, keys
from tasks.store.lease import holder_node
from tests.conftest import PROVIDERS
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text, tool_call
from tests.support.live_text import assistant_texts, fold, stream_entries
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

SLOW = {"pace": 0.2, "parts": 20}


def _redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url)


def _blocking_redis(stack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)


def _check(client, r: redis.Redis, chat: str) -> dict[str, str]:
    """The folded stream equals the transcript, message by message; returns the transcript's texts."""
    entries = stream_entries(r, keys.events(keys.owner("chat", chat)))
    folded = fold(entries)
    assert folded.breaches == []
    kept = assistant_texts(client.transcript(chat))
    assert kept, "the transcript has assistant messages with message ids"
    for message_id, said in kept.items():
        assert folded.texts.get(message_id, "") == said, (message_id, folded.texts, entries)
    return kept


def _first_delta(r: redis.Redis, chat: str, timeout: float = 20) -> dict:
    """Block until the chat's stream holds a text delta (read from the stream, not polled)."""
    key = keys.events(keys.owner("chat", chat))
    last = "0-0"
    while True:
        found = r.xread({key: last}, block=int(timeout * 1000), count=100)
        assert found, "no text delta arrived"
        for sid, fields in found[0][1]:
            last = sid.decode()
            entry = __import__("json").loads(fields[b"e"])
            if entry["type"] == "text.delta":
                return entry


def test_deltas_of_a_plain_answer_assemble_to_the_transcript(stack):
    """Several deltas, indexed from 0, one message id that the transcript's assistant message carries."""
    stack.fake_api.set_handler(Script([Reply([{"type": "text", "text": "Paris is the capital of France."}], parts=6)]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    result = client.wait(client.send_message("plain", "capital?"), timeout=30)
    assert result.status == "completed"
    kept = _check(client, r, "plain")
    assert list(kept.values()) == ["Paris is the capital of France."]
    deltas = [e for e in stream_entries(r, keys.events(keys.owner("chat", "plain"))) if e["type"] == "text.delta"]
    assert {e["turn_id"] for e in deltas} == {result.turn_id} and deltas[0]["attempt"] == 1
    assert all(e.type != "text.delta" for e in client.events("plain")), "client.events() returns events only"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_dropped_after_a_sentinel_leaves_only_the_final_answer(stack, provider):
    """The dropped attempt's text (with the sentinel) precedes its turn.retry; the replay's follows."""
    doomed = Reply([{"type": "text", "text": "SENTINEL words that vanish"}], parts=4)
    broken = failing(Fault("drop", after_events=5), doomed)
    stack.fake_api.set_handler(Script([broken, text("The final answer.")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    result = client.wait(client.send_message("drop", "hi"), timeout=30)
    assert result.status == "completed" and result.reply == "The final answer."
    entries = stream_entries(r, keys.events(keys.owner("chat", "drop")))
    cut = [i for i, e in enumerate(entries) if e["type"] == "text.delta" and e["attempt"] == 1]
    (retry,) = [i for i, e in enumerate(entries) if e["type"] == "turn.retry"]
    assert "".join(entries[i]["text"] for i in cut).startswith("SENTINEL")
    assert max(cut) < retry and entries[retry]["attempt"] == 1
    assert list(_check(client, r, "drop").values()) == ["The final answer."]


def test_an_in_stream_overload_discards_the_partial_text(stack):
    broken = failing(Fault("overloaded", after_events=5), Reply([{"type": "text", "text": "half an answer"}], parts=4))
    stack.fake_api.set_handler(Script([broken, text("Whole answer.")]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    result = client.wait(client.send_message("over", "hi"), timeout=30)
    assert result.status == "completed"
    assert list(_check(client, r, "over").values()) == ["Whole answer."]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_text_before_a_tool_call_and_after_it(stack, provider):
    """Two model steps, two message ids; each assistant message's text is its step's deltas."""
    stack.fake_api.set_handler(
        Script([tool_call("lookup", {"key": "a"}, text="Let me look that up."), text("It is 1.")])
    )
    stack.worker()
    client, r = stack.client(), _redis(stack)
    result = client.wait(client.send_message("tool", "what is a?"), timeout=30)
    assert result.status == "completed"
    kept = _check(client, r, "tool")
    assert sorted(kept.values()) == ["It is 1.", "Let me look that up."]


def test_sigterm_mid_answer_is_finished_by_another_worker(stack):
    """A drain aborts the stream; its turn.retry voids the cut attempt; the next worker's attempt is higher."""
    slow = Reply([{"type": "text", "text": "A slow answer that the deploy will cut in the middle."}], **SLOW)
    stack.fake_api.set_handler(Script([slow, text("Answered after the deploy.")]))
    workers = [stack.worker("w1"), stack.worker("w2")]
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("drain", "hi")
    first = _first_delta(_blocking_redis(stack), "drain")
    node = holder_node((r.get(keys.lease(keys.owner("chat", "drain"))) or b"").decode())
    (streaming,) = [w for w in workers if w.hostname == node]
    streaming.terminate()
    result = client.wait(ref, timeout=60)
    assert result.status == "completed" and result.reply == "Answered after the deploy."
    entries = stream_entries(r, keys.events(keys.owner("chat", "drain")))
    retry = [e for e in entries if e["type"] == "turn.retry" and e.get("attempt") == first["attempt"]]
    assert retry and retry[0]["message_id"] == first["message_id"]
    later = {e["attempt"] for e in entries if e["type"] == "text.delta" and e["attempt"] != first["attempt"]}
    assert later and min(later) > first["attempt"]
    assert list(_check(client, r, "drain").values()) == ["Answered after the deploy."]


def test_sigkill_mid_answer_voids_the_dead_workers_text(stack):
    """Nobody discarded the killed attempt; the execution that replays the step does, before its own text."""
    slow = Reply([{"type": "text", "text": "Text from a worker that is about to die mid sentence."}], **SLOW)
    stack.fake_api.set_handler(Script([slow, text("Answered by the survivor.")]))
    env = {"BATON_LEASE_TTL": "3"}
    w1 = stack.worker("w1", **env)
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("kill", "hi")
    first = _first_delta(_blocking_redis(stack), "kill")
    w1.kill9()
    stack.worker("w2", **env)
    result = client.wait(ref, timeout=60)
    assert result.status == "completed" and result.reply == "Answered by the survivor."
    entries = stream_entries(r, keys.events(keys.owner("chat", "kill")))
    voided = [e for e in entries if e["type"] == "turn.retry" and e.get("attempt") == first["attempt"]]
    assert voided and voided[0]["message_id"] == first["message_id"] and voided[0]["cause"] == "worker_lost"
    assert list(_check(client, r, "kill").values()) == ["Answered by the survivor."]


def test_a_stop_mid_answer_names_the_attempt_it_cut(stack):
    slow = Reply([{"type": "text", "text": "An answer the user will stop before it is done."}], **SLOW)
    stack.fake_api.set_handler(Script([slow]))
    stack.worker()
    client, r = stack.client(), _redis(stack)
    ref = client.send_message("stop", "hi")
    first = _first_delta(_blocking_redis(stack), "stop")
    client.stop("stop")
    result = client.wait(ref, timeout=30)
    assert result.status == "stopped"
    entries = stream_entries(r, keys.events(keys.owner("chat", "stop")))
    (stopped,) = [e for e in entries if e["type"] == "turn.stopped"]
    assert (stopped["message_id"], stopped["attempt"]) == (first["message_id"], first["attempt"])
    assert fold(entries).texts == {}


def test_live_text_is_deleted_after_its_retention(stack):
    """The settled turn's deltas go (the sweep deletes them); its events and transcript stay."""
    stack.fake_api.set_handler(Script([Reply([{"type": "text", "text": "Short lived text."}], parts=5)]))
    stack.worker(BATON_LIVE_TEXT_RETENTION="0")
    client, r = stack.client(), _redis(stack)
    result = client.wait(client.send_message("trim", "hi"), timeout=30)
    assert result.status == "completed"
    key = keys.events(keys.owner("chat", "trim"))

    def no_deltas() -> bool:
        return not any(e["type"] == "text.delta" for e in stream_entries(r, key))

    wait_until(no_deltas, 20, interval=0.2, what="the sweep to delete the settled turn's deltas")
    assert [e.type for e in client.events("trim")][-1] == "turn.completed"
    assert indexes.count(r, keys.DELTA_TRIM) == 0
