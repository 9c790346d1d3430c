"""A worker with no Anthropic credentials fails a request as provider_auth before sending it (nothing billed)."""

from __future__ import annotations

import pytest

from agent.errors import ProviderError
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass
from agent.provider.anthropic_provider import NO_CREDENTIALS, AnthropicProvider, credentials_problem
from agent.provider.base import ProviderRequest


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_IDENTITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no profile on disk either
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # were a request sent, it would fail otherwise


def test_without_credentials_the_problem_names_the_variable_and_a_request_is_refused_unsent(no_credentials):
    assert credentials_problem() == NO_CREDENTIALS and "ANTHROPIC_API_KEY" in NO_CREDENTIALS
    request = ProviderRequest(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ProviderError) as raised:
        AnthropicProvider(idle_timeout=1).stream(request, cancel=CancelToken())
    assert raised.value.failure_class is FailureClass.PROVIDER_AUTH and raised.value.retryable is False


def test_with_a_key_there_is_no_problem(no_credentials, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert credentials_problem() is None


def test_a_profile_that_cannot_be_read_is_a_problem_too(no_credentials, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("ANTHROPIC_PROFILE", "work")
    problem = credentials_problem()
    assert problem is not None and problem.startswith(NO_CREDENTIALS)
