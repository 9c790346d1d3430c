"""Agents as data: the definition's checks, the version's fingerprint, the registry, the pinning decision, a
client's check of a send's agent and model, and the history told as text for a request without tools."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError as DefinitionInvalid

from agent import Agent
from agent.agents import AgentError, Registry
from agent.agents.pinning import UPGRADED_NOTICE, choose, chosen_model
from agent.agents.resolved import Resolved, resolve
from agent.history.request import calls_as_text
from tasks.client.agent_pick import pick_agent
from tasks.client.core import ValidationError
from tasks.store.agents import fold
from tests.support.counting_tools import lookup, record_note


def test_a_definition_is_checked_when_it_is_made():
    """Names, models, thinking and tools are validated at construction; an Agent is frozen."""
    with pytest.raises(DefinitionInvalid, match="pattern"):
        Agent(name="bad name")
    with pytest.raises(DefinitionInvalid, match="not among models"):
        Agent(name="a", model="m1", models=["m2"])
    with pytest.raises(DefinitionInvalid, match="thinking"):
        Agent(name="a", thinking=10)
    with pytest.raises(DefinitionInvalid, match="two tools share a name"):
        Agent(name="a", tools=[lookup, lookup])
    with pytest.raises(DefinitionInvalid):
        Agent(name="a", api_key_env="sk-not a variable name")
    agent = Agent(name="a", thinking="high")
    with pytest.raises(DefinitionInvalid):
        agent.name = "b"  # type: ignore[misc]


def test_the_version_covers_what_the_model_sees_and_not_how_the_fleet_routes():
    """Same definition, same version, on any worker; instructions, tools, models or settings change it; the queue
    and `upgrade` do not; the key's variable name is in it, never a key."""
    base = Agent(name="s", instructions="Be brief.", tools=[lookup], mcp_servers=["crm"])
    version = resolve(base, provider="anthropic", model="m").version
    assert len(version) == 12 and version == resolve(base, provider="anthropic", model="m").version
    changed = [
        base.model_copy(update={"instructions": "Be thorough."}),
        base.model_copy(update={"tools": (lookup, record_note)}),
        base.model_copy(update={"max_tokens": 10}),
        base.model_copy(update={"api_key_env": "OTHER_KEY"}),
    ]
    assert all(resolve(a, provider="anthropic", model="m").version != version for a in changed)
    assert resolve(base, provider="openai", model="m").version != version
    same = [base.model_copy(update={"queue": "q"}), base.model_copy(update={"upgrade": True})]
    assert all(resolve(a, provider="anthropic", model="m").version == version for a in same)
    recorded = resolve(base, provider="anthropic", model="m")
    again = Resolved.from_dict(recorded.as_dict())
    assert again == recorded and again.version == version


def test_the_registry_refuses_duplicates_and_unknown_servers_and_defaults_to_the_first():
    one, two = Agent(name="one"), Agent(name="two", mcp_servers=["crm"])
    registry = Registry.build([one, two], provider="anthropic", model="m", servers=["crm"])
    assert registry.default == "one" and registry.get(None) is registry.get("one") and registry.get("x") is None
    with pytest.raises(AgentError, match="two agents are named 'one'"):
        Registry.build([one, one], provider="anthropic", model="m", servers=[])
    with pytest.raises(AgentError, match="agent 'two' names MCP server 'crm'"):
        Registry.build([one, two], provider="anthropic", model="m", servers=[])
    default = Registry.of_settings(provider="openai", model="gpt", tools=[lookup], servers=["crm"])
    agent = default.get(None)
    assert agent is not None and (agent.name, agent.provider, agent.model, agent.mcp_servers) == (
        "default", "openai", "gpt", ("crm",))


def test_a_resumed_unit_keeps_its_version_unless_its_agent_upgrades():
    """Pinned by default; `upgrade=True` moves it and says so; an unknown agent hands it back; a lost recorded
    definition falls back to the worker's, said as an upgrade."""
    v1 = resolve(Agent(name="s", instructions="v1"), provider="anthropic", model="m")
    v2 = resolve(Agent(name="s", instructions="v2"), provider="anthropic", model="m")
    v2_up = resolve(Agent(name="s", instructions="v2", upgrade=True), provider="anthropic", model="m")
    recorded = {v1.version: v1}.get
    assert choose(None, v2, recorded).agent is v2  # a first start takes the worker's
    assert choose(v2.version, v2, recorded).agent is v2
    pinned = choose(v1.version, v2, recorded)
    assert pinned.agent == v1 and pinned.agent.instructions == "v1" and pinned.notice is None
    moved = choose(v1.version, v2_up, recorded)
    assert moved.agent is v2_up and moved.notice == UPGRADED_NOTICE.format(before=v1.version, after=v2_up.version)
    assert choose(v1.version, None, recorded).agent is None
    lost = choose("000000000000", v2, recorded)
    assert lost.agent is v2 and lost.upgraded_from == "000000000000"
    assert chosen_model(resolve(Agent(name="s", model="a", models=["a", "b"]), provider="p", model="x"), "b") == "b"
    assert chosen_model(resolve(Agent(name="s", model="a"), provider="p", model="x"), "b") == "a"


def _published(now: float) -> list:
    def entry(name: str, version: str, models: list[str], queue: str | None, default: bool, at: float) -> str:
        return json.dumps({"name": name, "version": version, "models": models, "queue": queue, "default": default,
                           "at": at})

    entries = {
        "support\tw1": entry("support", "v1", ["a", "b"], None, True, now),
        "coder\tw1": entry("coder", "c1", ["c"], "gpu", False, now),
        "old\tw0": entry("old", "o", ["o"], None, False, now - 1000),
    }
    listed, stale = fold(entries, now, keep=600)
    assert stale == ["old\tw0"]
    return listed


def test_a_send_names_an_agent_and_model_the_workers_publish():
    """An unknown agent or a model its agent does not allow is refused naming what is allowed; a send naming none
    gets the default's queue (the enqueue script keeps the chat's instead, when it has one)."""
    listed = _published(1000.0)
    assert [p.name for p in listed] == ["support", "coder"]
    assert pick_agent(listed, "coder", "c").queue == "gpu"
    assert pick_agent(listed, None, "b").model == "b"
    assert pick_agent(listed, None, None).agent is None
    with pytest.raises(ValidationError, match="unknown agent 'nope'; the workers serve: support, coder"):
        pick_agent(listed, "nope", None)
    with pytest.raises(ValidationError, match="model 'z' is not one agent 'support' allows: a, b"):
        pick_agent(listed, None, "z")
    with pytest.raises(ValidationError, match="is not one agent 'coder' allows"):
        pick_agent(listed, None, "a", chat_agent="coder")


def test_a_history_with_tool_calls_is_told_as_text_for_a_request_without_tools():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"k": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "v", "is_error": True}]},
    ]
    told = calls_as_text(messages)
    assert told[0] is messages[0]
    assert told[1]["content"] == [{"type": "text", "text": '[called tool lookup with {"k": 1}]'}]
    assert told[2]["content"] == [{"type": "text", "text": "[tool result (error): v]"}]
    plain = [messages[0]]
    assert calls_as_text(plain) is plain
