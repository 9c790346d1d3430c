"""The client's ids: a trailing newline is no id, and a chat and a run sharing an id stay apart when asked."""

from __future__ import annotations

import fakeredis
import pytest

from config.settings import Settings
from tasks.client import Client, ValidationError
from tasks.store import keys


@pytest.fixture
def client():
    c = Client(Settings(redis_url="redis://127.0.0.1:1/0"))
    c.redis = fakeredis.FakeRedis()
    yield c
    c.close()


@pytest.mark.parametrize("bad", ["c1\n", "c1\r\n", "\nc1", "", "-c1", "a" * 129])
def test_an_id_with_a_newline_or_bad_characters_is_refused(client, bad):
    with pytest.raises(ValidationError):
        client.transcript(bad)


def test_kind_picks_the_chat_even_when_a_run_has_the_same_id(client):
    """Without `kind` an id names the run when one exists (the CLI's rule); `kind="chat"` names the chat."""
    client.redis.hset(keys.record(keys.owner("run", "x"), "x"), mapping={"status": '"running"'})
    client.redis.rpush(keys.transcript(keys.owner("chat", "x")), '{"role": "user", "content": [], "turn_id": "t"}')
    assert client.transcript("x") == []  # the run's (empty) transcript
    assert len(client.transcript("x", kind="chat")) == 1
    assert client.stop("x", kind="chat")["stopped"] is False  # the chat has nothing running
    assert client.redis.get(keys.stop(keys.owner("run", "x"))) is None  # and the run was not asked to stop
