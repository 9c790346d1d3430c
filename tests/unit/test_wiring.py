"""What a worker process builds once and reuses: the provider client, the chat tools."""

from __future__ import annotations

import pytest

from config.settings import Settings
from tasks.execution import wiring

SETTINGS = Settings(redis_url="redis://fake:6379/0", provider="anthropic", tools="bench.tools:TOOLS")


@pytest.fixture(autouse=True)
def _api_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    wiring._providers.clear()
    yield
    wiring._providers.clear()


def test_one_provider_per_process_and_a_new_one_after_fork(monkeypatch):
    """Executions of one process share the provider (one HTTP pool); a forked child builds its own."""
    first = wiring.build_provider(SETTINGS, None)
    assert wiring.build_provider(SETTINGS, None) is first
    monkeypatch.setattr(wiring.os, "getpid", lambda: -1)  # what a pool child sees after the fork
    assert wiring.build_provider(SETTINGS, None) is not first


def test_chat_tools_are_loaded_once_and_read_only():
    """Every turn gets the same tool set, and no turn can change it for the next."""
    tools = wiring.chat_tools(SETTINGS)
    assert wiring.chat_tools(SETTINGS) is tools and list(tools) == ["peek"]
    with pytest.raises(TypeError):
        tools["other"] = tools["peek"]  # type: ignore[index]
    assert "peek" in wiring.run_tools(SETTINGS, "/tmp") and "peek" in wiring.run_tools(SETTINGS, "/tmp")
