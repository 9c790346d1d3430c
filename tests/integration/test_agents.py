"""Agents in one fleet, through real workers and the real SDKs against the fakes over HTTP: each agent's
instructions, tools, model and settings in its requests; a per-turn model pick and the refusals that enqueue
nothing; a chat that switches agent (its old tool calls still a request the API takes); an agent on its own
OpenAI-compatible endpoint with its own key variable; an agent on its own Celery queue.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from tasks.client import ValidationError
from tasks.store import keys
from tests.conftest import PROVIDERS, Stack
from tests.support.fake_anthropic import ByConversation, text, tool_call
from tests.support.fake_openai import FakeChatServer
from tests.support.processes import REPO, wait_until
from tests.support.published import wait_for_agents

pytestmark = pytest.mark.integration

FLEET = {"BATON_AGENTS": "tests.support.agents_fleet:AGENTS"}


def system_text(request: dict[str, Any]) -> str | None:
    system = request.get("system")
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system)
    return system


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["name"] for t in request.get("tools") or []]


def settings_of(fake, request: dict[str, Any]) -> tuple[str, int, float | None]:
    """(model, max tokens, temperature) of a request as its API spelt them (the OpenAI fake's `requests` are
    neutral; its wire bodies say `max_completion_tokens`)."""
    if isinstance(fake, FakeChatServer):
        wire = fake.wire_requests[fake.requests.index(request)]
        return wire["model"], wire["max_completion_tokens"], wire.get("temperature")
    return request["model"], request["max_tokens"], request.get("temperature")


def requests_of(fake, first_text: str) -> list[dict[str, Any]]:
    """The requests of one conversation (by its first user message)."""
    out = []
    for r in fake.requests:
        first = r["messages"][0]["content"]
        body = first if isinstance(first, str) else "".join(b.get("text", "") for b in first if isinstance(b, dict))
        if first_text in body:
            out.append(r)
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_two_agents_in_one_fleet_pick_models_switch_and_refuse(stack: Stack, provider):
    """Two chats on two agents of one worker: each request carries its agent's system prompt, tools, model,
    max_tokens and temperature; a turn picks another of its agent's models; a chat switches from the agent with
    tools to the one without, and its old tool round goes on as text the API takes; an unknown agent or a model
    the agent does not allow is refused naming what is allowed, with nothing enqueued."""
    fake = stack.fake_api
    fake.set_handler(ByConversation({
        "billing q": [tool_call("lookup", {"key": "inv-1"}), text("Invoice found."), text("Picked b."),
                      text("Triaged."), text("Still triage.")],
        "sort me": [text("Queue: billing.")],
    }))
    stack.worker("w1", **FLEET)
    client = stack.client()
    listed = wait_for_agents(client, "support", "triage")
    assert listed["support"]["default"] is True and listed["support"]["models"] == ["claude-a", "claude-b"]
    assert [t["name"] for t in listed["support"]["tools"]] == ["lookup"]
    assert listed["support"]["workers"][0]["version"] == listed["support"]["version"]

    first = client.wait(client.send_message("chat-s", "billing q", agent="support"), timeout=60)
    other = client.wait(client.send_message("chat-t", "sort me", agent="triage"), timeout=60)
    assert (first.status, first.reply, first.agent, first.model) == ("completed", "Invoice found.", "support",
                                                                     "claude-a")
    assert first.agent_version == listed["support"]["version"]
    assert (other.reply, other.agent, other.model) == ("Queue: billing.", "triage", "claude-cheap")

    support = requests_of(fake, "billing q")
    assert [system_text(r) for r in support] == ["You are Acme's billing assistant."] * 2
    assert [tool_names(r) for r in support] == [["lookup"]] * 2
    assert {settings_of(fake, r) for r in support} == {("claude-a", 1000, 0.2)}
    triage = requests_of(fake, "sort me")
    assert (system_text(triage[0]), tool_names(triage[0]), triage[0]["model"]) == (
        "Sort the question into a queue.", [], "claude-cheap")

    picked = client.wait(client.send_message("chat-s", "again, on b", model="claude-b"), timeout=60)
    assert (picked.reply, picked.agent, picked.model) == ("Picked b.", "support", "claude-b")
    assert fake.requests[-1]["model"] == "claude-b"

    switched = client.wait(client.send_message("chat-s", "now triage this", agent="triage"), timeout=60)
    assert (switched.status, switched.reply, switched.agent) == ("completed", "Triaged.", "triage")
    moved = requests_of(fake, "billing q")[-1]
    assert system_text(moved) == "Sort the question into a queue." and tool_names(moved) == []
    if provider == "anthropic":  # the Messages API refuses tool blocks without tools; Chat Completions takes them
        assert "[called tool lookup with" in str(moved["messages"]) and "tool_use" not in str(moved["messages"])
    kept = client.wait(client.send_message("chat-s", "and one more"), timeout=60)
    assert (kept.reply, kept.agent) == ("Still triage.", "triage")  # a turn naming none keeps the chat's agent
    assert fake.rejections == []

    models = [m.model for m in client.transcript("chat-s") if m.role == "assistant"]
    assert models == ["claude-a", "claude-a", "claude-b", "claude-cheap", "claude-cheap"]
    started = [e for e in client.events("chat-s") if e.type == "turn.started"]
    assert [(e.model_extra or {}).get("agent") for e in started] == ["support", "support", "triage", "triage"]

    before = client.redis.llen(keys.turns(keys.owner("chat", "chat-r")))
    with pytest.raises(ValidationError, match="claude-a, claude-b"):
        client.send_message("chat-r", "hi", agent="support", model="gpt-9")
    with pytest.raises(ValidationError, match=r"unknown agent 'nobody'.*support"):
        client.send_message("chat-r", "hi", agent="nobody")
    assert client.redis.llen(keys.turns(keys.owner("chat", "chat-r"))) == before == 0


@pytest.mark.parametrize("provider", ["anthropic"])
def test_an_agent_on_its_own_endpoint_with_its_own_key_variable(stack: Stack, provider):
    """The `local` agent speaks Chat Completions to its own server (`base_url`) with the key its `api_key_env`
    names; the fleet's other agents stay on the Anthropic fake; no key reaches a request body or the record."""
    local = FakeChatServer(api_key="local-secret").start()
    try:
        local.set_handler(ByConversation({"ask local": [tool_call("lookup", {"key": "k"}), text("Local answer.")]}))
        stack.fake_api.set_handler(ByConversation({"ask claude": [text("Claude answer.")]}))
        stack.worker("w1", **FLEET, BATON_TEST_LOCAL_URL=local.url, LOCAL_LLM_KEY="local-secret")
        client = stack.client()
        wait_for_agents(client, "local")
        mine = client.wait(client.send_message("chat-l", "ask local", agent="local"), timeout=60)
        theirs = client.wait(client.send_message("chat-c", "ask claude"), timeout=60)
        assert (mine.status, mine.reply, mine.model) == ("completed", "Local answer.", "local-llm")
        assert (theirs.reply, theirs.agent) == ("Claude answer.", "support")
        assert local.request_count == 2 and local.rejections == []
        assert [r["model"] for r in local.wire_requests] == ["local-llm"] * 2
        assert "local-secret" not in str(local.wire_requests) + str(client.redis.hgetall(keys.AGENTS))
        assert stack.fake_api.request_count == 1
    finally:
        local.stop()


@pytest.mark.parametrize("provider", ["anthropic"])
def test_units_of_an_agent_with_a_queue_go_to_that_queue(stack: Stack, provider):
    """`queued` has `queue=`: its turns reach the worker consuming that queue. The worker on the default queue does
    not serve it (and gives up at once), so a turn sent to the wrong queue would fail as agent_unknown."""
    special = f"{stack.queue}-special"
    stack.fake_api.set_handler(
        ByConversation({"for the queue": [text("Served there."), text("Again.")], "plain": [text("Here.")]})
    )
    stack.worker("w-default", BATON_AGENTS="tests.support.agents_fleet:WITHOUT_QUEUED", BATON_AGENT_WAIT="0")
    stack.worker("w-special", **FLEET, BATON_QUEUE=special, BATON_TEST_AGENT_QUEUE=special)
    client = stack.client(BATON_TEST_AGENT_QUEUE=special)
    assert wait_for_agents(client, "queued")["queued"]["queue"] == special
    result = client.wait(client.send_message("chat-q", "for the queue", agent="queued"), timeout=60)
    assert (result.status, result.reply, result.agent) == ("completed", "Served there.", "queued")
    plain = client.wait(client.send_message("chat-p", "plain"), timeout=60)
    assert plain.status == "completed"
    again = client.wait(client.send_message("chat-q", "for the queue"), timeout=60)  # the chat keeps its queue
    assert (again.status, again.agent) == ("completed", "queued")


@pytest.mark.parametrize("provider", ["anthropic"])
def test_a_turn_waiting_in_its_agents_queue_is_not_taken_for_lost(stack: Stack, provider):
    """`queued`'s queue has no worker yet: its turn waits there past the pending check (twice the lease TTL), and the
    lost-message sweep of the worker on the default queue looks for its message in the agent's queue, finds it and
    leaves it alone: one message, not a copy a lease period (red before: it looked only in its own queue and
    republished it). A worker on the agent's queue then answers the turn once."""
    import redis

    special = f"{stack.queue}-waiting"
    stack.fake_api.set_handler(ByConversation({"wait for me": [text("Answered once.")]}))
    stack.worker("w-default", **FLEET, BATON_TEST_AGENT_QUEUE=special)
    client = stack.client(BATON_TEST_AGENT_QUEUE=special)
    wait_for_agents(client, "queued")
    ref = client.send_message("chat-w", "wait for me", agent="queued")
    r = redis.Redis.from_url(stack.redis_server.url)
    owner = keys.owner("chat", "chat-w")
    enqueued = r.zscore(keys.PENDING, owner)
    assert enqueued is not None and r.llen(special) == 1
    # A sweep that checked it moves its next check on (ZADD XX now): the event to wait for.
    wait_until(lambda: (r.zscore(keys.PENDING, owner) or 0) > enqueued + 5, 60, what="the lost-message sweep's check")
    assert r.llen(special) == 1
    assert "republished" not in stack.workers[0].log()
    stack.worker("w-waiting", **FLEET, BATON_QUEUE=special, BATON_TEST_AGENT_QUEUE=special)
    done = client.wait(ref, timeout=60)
    assert (done.status, done.reply, done.agent) == ("completed", "Answered once.", "queued")
    assert stack.fake_api.request_count == 1


@pytest.mark.parametrize("provider", ["anthropic"])
def test_http_usechat_and_asyncio_carry_agent_and_model(stack: Stack, provider, serve):
    """`baton serve`: the messages route's body and the `useChat` body (what an app's model picker adds through the
    transport's `body` option) name the agent and model; a model the agent does not allow is a 422 naming the
    allowed ones, and nothing is enqueued. The asyncio client lists, refuses and sends the same way."""
    stack.fake_api.set_handler(ByConversation({"over http": [text("Triaged over HTTP.")],
                                               "from useChat": [text("Picked over useChat.")],
                                               "from asyncio": [text("Triaged from asyncio.")]}))
    stack.worker("w1", **FLEET)
    api = serve(**FLEET)
    client = stack.client()
    wait_for_agents(client, "support", "triage")

    status, sent = api.post("/api/chats/h1/messages", {"text": "over http", "agent": "triage"})
    assert status == 202, sent
    done = client.wait(_ref("h1", sent), timeout=60)
    assert (done.reply, done.agent, done.model) == ("Triaged over HTTP.", "triage", "claude-cheap")
    status, refused = api.post("/api/chats/h2/messages", {"text": "hi", "agent": "support", "model": "gpt-9"})
    assert status == 422 and "claude-a, claude-b" in str(refused)
    assert client.redis.llen(keys.turns(keys.owner("chat", "h2"))) == 0

    async def through_asyncio() -> tuple[Any, list[str]]:
        async with stack.async_client() as ac:
            listed = [a["name"] for a in (await ac.agents())["agents"]]
            with pytest.raises(ValidationError, match="unknown agent"):
                await ac.send_message("a1", "hi", agent="nobody")
            return await ac.wait(await ac.send_message("a1", "from asyncio", agent="triage"), timeout=60), listed

    result, names = asyncio.run(through_asyncio())
    assert "triage" in names and (result.reply, result.agent) == ("Triaged from asyncio.", "triage")

    body = {"id": "u1", "trigger": "submit-message", "agent": "support", "model": "claude-b",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "from useChat"}]}]}
    status, streamed = api.post("/api/chat", body)
    assert status == 200 and "Picked over useChat." in streamed
    turn = client.transcript("u1")[-1]
    assert (turn.role, turn.model) == ("assistant", "claude-b")
    assert stack.fake_api.requests[-1]["model"] == "claude-b"


def _ref(chat_id: str, sent: dict[str, Any]):
    from tasks.store.records import TurnRef

    return TurnRef(chat_id=chat_id, turn_id=sent["turn_id"], task_id=sent["task_id"])


@pytest.mark.parametrize("provider", ["anthropic"])
@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("tests.support.agents_fleet:DUPLICATES", "two agents are named 'support'"),
        ("tests.support.agents_fleet:UNKNOWN_SERVER", "agent 'crm-bot' names MCP server 'crm'"),
        ("tests.support.agents_fleet:NOTHING", "cannot be loaded"),
    ],
)
def test_a_worker_refuses_to_start_with_agents_it_cannot_serve(stack: Stack, provider, spec, words):
    """A duplicate name, an MCP server BATON_MCP_SERVERS does not define, or a spec that names nothing stops the
    worker at start (exit 2), naming the variable and the agent."""
    with pytest.raises(RuntimeError, match="exited with 2") as info:
        stack.worker("w-bad", BATON_AGENTS=spec)
    assert "invalid settings: BATON_AGENTS: " in str(info.value)
    assert words in str(info.value)


@pytest.mark.parametrize("provider", ["anthropic"])
def test_baton_agents_lists_what_the_workers_serve(stack: Stack, provider):
    """`baton agents --json`: each agent with its version, models, tools and the workers serving it; the plain form
    reads as a list a person checks after a deploy."""
    stack.worker("w1", **FLEET)
    wait_for_agents(stack.client(), "support")
    env = {**stack.env, **FLEET}
    shown = subprocess.run([sys.executable, "-m", "tasks.cli", "agents", "--json"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)["agents"]
    assert [a["name"] for a in listed] == ["support", "local", "queued", "triage"]
    assert listed[0]["default"] is True and listed[0]["workers"][0]["hostname"].startswith("w1@")
    plain = subprocess.run([sys.executable, "-m", "tasks.cli", "agents"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 0 and "support (default)  version " in plain.stdout
    assert "tools: lookup (read)" in plain.stdout
