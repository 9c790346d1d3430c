"""The web layer's pure parts, without Redis or a server: the token rule, stream ids, SSE messages,
error wording, and what `baton serve` decides before it listens."""

from __future__ import annotations

import json
import logging

import pytest

from config.hosts import is_loopback
from config.settings import Settings
from tasks.cli.serve import RedactToken, page_url, refusal
from web.auth import presented_token, token_ok
from web.errors import describe
from web.hosts import host_of
from web.stream import parse_stream_id, resume_from, to_message


def test_the_token_is_read_from_the_bearer_header_first_then_the_query():
    """`Authorization: Bearer T` (any case of "Bearer") wins; `?token=` is the fallback EventSource needs."""
    assert presented_token("Bearer abc", "q") == "abc"
    assert presented_token("bearer  abc ", None) == "abc"
    assert presented_token(None, "q") == "q"
    assert presented_token("Basic Zm9vOmJhcg==", "q") == "q"  # not a bearer token: not ours
    assert presented_token(None, None) is None


def test_token_check():
    """No configured token lets everything through; with one, only an exact match passes."""
    assert token_ok(None, None) and token_ok(None, "anything")
    assert token_ok("s3cret", "s3cret")
    for offered in (None, "", "s3cre", "s3cret ", "S3CRET", "s3cret\x00"):
        assert not token_ok("s3cret", offered), offered
    assert token_ok("žeton-ü", "žeton-ü") and not token_ok("žeton-ü", "zeton-u")  # non-ASCII is compared too


@pytest.mark.parametrize("raw", ["0-0", "1700000000000-0", "1-18446744073709551615", "18446744073709551615-3"])
def test_stream_ids_accepted(raw):
    assert parse_stream_id(raw) == raw


@pytest.mark.parametrize(
    "raw", ["", "12", "a-1", "1-", "-1", "1-2-3", " 1-2", "1-2\n", "18446744073709551616-0", "1-" + "9" * 21, "$", "+"]
)
def test_malformed_stream_ids_refused(raw):
    """Anything but MS-SEQ with 64-bit unsigned parts is refused, so Redis never sees it."""
    with pytest.raises(ValueError, match="not a stream id"):
        parse_stream_id(raw)


def test_where_a_stream_resumes():
    """From the start without a resume id; Last-Event-ID wins over ?after=; an empty header counts as none."""
    assert resume_from(None, None) == "0-0"
    assert resume_from(None, "5-1") == "5-1"
    assert resume_from("7-0", "5-1") == "7-0"
    assert resume_from("", "5-1") == "5-1"
    with pytest.raises(ValueError):
        resume_from("junk", "5-1")


def test_an_entry_becomes_one_sse_message_with_its_stream_id():
    """id = the stream id, event = the type, data = the stored object plus "id" (any type, deltas too)."""
    stored = {"type": "text.delta", "at": 1.5, "chat_id": "c", "turn_id": "t", "index": 0, "text": "Hé\nllo"}
    message = to_message("17-2", json.dumps(stored).encode())
    assert message is not None and (message.id, message.event) == ("17-2", "text.delta")
    assert json.loads(message.data) == {**stored, "id": "17-2"}
    wire = message.encode().decode()
    assert wire.count("data: ") == 1  # the JSON is one line: a newline in the text is escaped, not split
    assert wire.startswith("id: 17-2\r\nevent: text.delta\r\ndata: {") and wire.endswith("\r\n\r\n")


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"no": "type"}', b'{"type": 5}'])
def test_an_unreadable_entry_is_skipped(raw):
    assert to_message("1-0", raw) is None


def test_validation_errors_read_as_one_line():
    """FastAPI's error lists become one `detail` string a person can act on."""
    assert describe([{"type": "missing", "loc": ("body", "text"), "msg": "Field required"}]) == "text: Field required"
    assert "not valid JSON" in describe([{"type": "json_invalid", "loc": ("body", 3), "msg": "x", "ctx": {}}])
    assert "Content-Type: application/json" in describe([{"type": "model_attributes_type", "loc": ("body",)}])
    assert describe([]) == "invalid request"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.4", False), ("example.com", False), ("", False)],
)  # fmt: skip
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_serve_refuses_non_loopback_without_a_token_and_never_prints_it():
    """Without a token only loopback is allowed; the printed URL hints at the token without showing it."""
    bare, guarded = Settings(), Settings(api_token="tok-123456")
    assert refusal("127.0.0.1", bare) is None
    assert "BATON_API_TOKEN" in (refusal("0.0.0.0", bare) or "")
    assert refusal("0.0.0.0", guarded) is None
    assert page_url("127.0.0.1", 8000, bare) == "http://127.0.0.1:8000/"
    assert page_url("::1", 8000, guarded) == "http://[::1]:8000/?token=$BATON_API_TOKEN"
    assert "tok-123456" not in page_url("0.0.0.0", 80, guarded)


def test_the_access_log_never_shows_a_token():
    """uvicorn's access line for `/?chat=c&token=T` is logged with the token blanked."""
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/api/chats/c/stream?token=tok-123456&after=1-0", "1.1", 200), None,
    )  # fmt: skip
    assert RedactToken().filter(record)
    line = record.getMessage()
    assert "tok-123456" not in line and "?token=***&after=1-0" in line


@pytest.mark.parametrize("raw", ["c1\n", "", "-x", "a b", "x" * 129])
def test_ids_are_checked_whole(raw):
    """A chat or run id is checked over its whole length (a trailing newline is not an id)."""
    from tasks.client import ValidationError
    from web.ids import check_id

    with pytest.raises(ValidationError, match="chat_id must be"):
        check_id(raw, "chat_id")
    assert check_id("c1.a_b-2", "chat_id") == "c1.a_b-2"


@pytest.mark.parametrize(
    ("header", "host"),
    [("127.0.0.1:8000", "127.0.0.1"), ("localhost", "localhost"), ("[::1]:8000", "::1"), ("[::1]", "::1"),
     ("evil.example:80", "evil.example"), ("", ""), ("::1", "::1")],
)  # fmt: skip
def test_host_header_parsing(header, host):
    """The host part of a Host header, IPv6 brackets included, so the loopback guard judges the name."""
    assert host_of(header) == host
