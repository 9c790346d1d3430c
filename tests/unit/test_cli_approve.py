"""`baton approve/deny`: who decided is the OS user unless `--by` names someone (issue 31), and the client
takes a name only on one line and short, so the audit trail holds what a person typed, not a document."""

from __future__ import annotations

import getpass
from typing import Any

import fakeredis
import pytest

from config.settings import Settings
from tasks.cli import main as cli
from tasks.client import Client, NotFound, ValidationError


class Deciding:
    """A client double that records what each decision was asked with."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def approve(self, ident: str, tool_use_id: str, **kw: Any) -> dict[str, Any]:
        self.asked.append(("approve", kw))
        return {"id": ident, "tool_use_id": tool_use_id, "decision": "approved"}

    def deny(self, ident: str, tool_use_id: str, **kw: Any) -> dict[str, Any]:
        self.asked.append(("deny", kw))
        return {"id": ident, "tool_use_id": tool_use_id, "decision": "denied"}


def decide(*argv: str) -> dict[str, Any]:
    client = Deciding()
    assert cli._dispatch(client, cli._parser().parse_args(list(argv))) == 0
    ((_, asked),) = client.asked
    return asked


def test_the_os_user_decides_unless_by_names_someone(monkeypatch):
    monkeypatch.setattr(getpass, "getuser", lambda: "ops-on-call")
    assert decide("approve", "chat-1", "toolu_1")["by"] == "ops-on-call"
    assert decide("deny", "chat-1", "toolu_1", "--reason", "no")["by"] == "ops-on-call"
    assert decide("approve", "chat-1", "toolu_1", "--by", "alice")["by"] == "alice"
    assert decide("deny", "chat-1", "toolu_1", "--by", "bob")["by"] == "bob"


@pytest.mark.parametrize("failure", [OSError("no user"), KeyError("getpwuid(): uid not found: 1234")])
def test_no_os_user_is_no_name_not_a_failure(monkeypatch, failure):
    """A container's uid without a passwd entry and no LOGNAME/USER: the decision goes through, unnamed."""

    def getuser() -> str:
        raise failure

    monkeypatch.setattr(getpass, "getuser", getuser)
    assert decide("approve", "chat-1", "toolu_1")["by"] is None


def test_the_real_os_user_is_read_from_the_environment_first(monkeypatch):
    monkeypatch.setenv("LOGNAME", "from-logname")
    assert decide("approve", "chat-1", "toolu_1")["by"] == "from-logname"


@pytest.fixture
def client():
    c = Client(Settings(redis_url="redis://127.0.0.1:1/0"))
    c.redis = fakeredis.FakeRedis()
    yield c
    c.close()


@pytest.mark.parametrize("bad", ["x" * 201, "alice\nbob", "tab\there", "nul\x00", "del\x7f", 7])
def test_a_name_that_is_not_one_short_line_is_refused(client, bad):
    """Refused before anything is looked up (the API answers 422 with this message, the CLI exits 2)."""
    with pytest.raises(ValidationError, match="by must be a name on one line"):
        client.approve("chat-1", "toolu_1", by=bad)
    with pytest.raises(ValidationError, match="by must be a name on one line"):
        client.deny("chat-1", "toolu_1", by=bad)


@pytest.mark.parametrize("fine", [None, "", "   ", "x" * 200, "  Ada Lovelace  ", "Žofie Nováková 🙂"])
def test_a_short_name_passes_to_the_lookup(client, fine):
    with pytest.raises(NotFound):  # nothing waits in an empty store: the name itself was accepted
        client.approve("chat-1", "toolu_1", by=fine)
