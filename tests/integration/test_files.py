"""Files in messages, end to end: an image and a PDF sent through the sync client, the asyncio client, the CLI and
HTTP reach each provider's fake (the real SDKs, over HTTP) byte for byte, on the first request and on every replay;
bad files are refused with nothing enqueued; the files route serves them; deleting the chat deletes them.

One worker stack (Redis, the provider's fake, a worker, `baton serve`) per provider for the whole module: every
test uses its own chat, and the fake answers every request the same way unless a chat's text asks for a fault.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import os
import struct
import subprocess
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.client import Attachment, ValidationError
from tasks.store import keys
from tests.conftest import PROVIDERS, Stack, fake_server
from tests.integration.test_usechat import JS, node_or_skip
from tests.support.fake_anthropic import Fault, Reply, failing, first_user_text, text
from tests.support.processes import REPO, RedisServer
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

TOKEN = "files-test-token"
FLAKY = "fail once, then answer"  # a chat whose first request fails (500): the retry replays the same request
DRAINED = "stall until drained"  # a chat whose first request stalls until its worker drains: another resends it
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))


def png(width: int, height: int, seed: int = 0) -> bytes:
    """A real PNG (one colour; `seed` changes it), so its header says its size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes([seed % 256, 0, 0]) * width
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))


PNG = png(64, 48)
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


EXPECTED = [
    {"type": "image", "media_type": "image/png", "sha256": sha(PNG)},
    {"type": "document", "media_type": "application/pdf", "sha256": sha(PDF)},
]


class Handler:
    """Answers `Seen.`; the first request of a chat whose text is FLAKY fails with a 500 (the SDK does not retry
    it: BATON's own retry replays the same request)."""

    def __init__(self) -> None:
        self.flaked: set[str] = set()

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        words = first_user_text(body)
        if words in (FLAKY, DRAINED) and words not in self.flaked:
            self.flaked.add(words)
            return failing(Fault("http", status=500)) if words == FLAKY else STALL
        return text("Seen.")


@pytest.fixture(scope="module", params=PROVIDERS)
def files_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"files-{request.param}")
    redis_server = RedisServer(tmp / "redis").start()
    fake = fake_server(request.param).start()
    fake.set_handler(Handler())
    stack = Stack(redis_server, fake, tmp)
    stack.worker("w1", concurrency=1)  # one process: a replay reads the worker's file cache, as most replays do
    try:
        yield stack
    finally:
        stack.stop()
        fake.stop()
        redis_server.stop()


@pytest.fixture(scope="module")
def api(files_stack: Stack) -> Iterator[ApiServer]:
    server = ApiServer({**files_stack.env, "BATON_API_TOKEN": TOKEN}, files_stack.tmp_path).start()
    yield server
    server.stop()


def received_for(stack: Stack, words: str) -> list[list[dict[str, str]]]:
    """The files of every request whose first user message says `words`, in order."""
    assert stack.fake_api is not None
    requests = list(stack.fake_api.requests)
    return [got for body, got in zip(requests, stack.fake_api.files_received(), strict=True)
            if first_user_text(body) == words]


def attachments() -> list[Attachment]:
    return [Attachment(PNG, "image/png", "shot.png"), Attachment(PDF, "application/pdf", "spec.pdf")]


def test_the_sync_client_sends_an_image_and_a_pdf_byte_exact_and_every_later_request_resends_them(files_stack):
    """The first request carries the PNG and the PDF with their exact bytes; the chat's next turn sends them
    again (its history) with the same bytes; the transcript holds references only."""
    c = files_stack.client()
    words = "what is in these?"
    result = c.wait(c.send_message("sync-files", words, files=attachments()), timeout=60)
    assert result.status == "completed" and result.reply == "Seen."
    assert c.wait(c.send_message("sync-files", "and now?"), timeout=60).status == "completed"
    assert received_for(files_stack, words) == [EXPECTED, EXPECTED]
    [user] = [m for m in c.transcript("sync-files") if m.role == "user"][:1]
    assert [b.model_dump() for b in user.content[1:]] == [
        {"type": "image", "media_type": "image/png", "sha256": sha(PNG), "bytes": len(PNG), "name": "shot.png"},
        {"type": "document", "media_type": "application/pdf", "sha256": sha(PDF), "bytes": len(PDF),
         "name": "spec.pdf"},
    ]
    raw = c.redis.lrange(keys.transcript(keys.owner("chat", "sync-files")), 0, -1)
    assert base64.b64encode(PNG).decode()[:40] not in b"".join(raw).decode()
    assert c.file("sync-files", sha(PNG)) == (PNG, "image/png")


def test_the_asyncio_client_sends_them_too(files_stack):
    async def send() -> str:
        ac = files_stack.async_client()
        async with ac:
            ref = await ac.send_message("async-files", "async look", files=attachments())
            return (await ac.wait(ref, timeout=60)).status

    assert asyncio.run(send()) == "completed"
    assert received_for(files_stack, "async look") == [EXPECTED]


def test_a_replayed_request_sends_the_same_bytes(files_stack):
    """The first request is refused; Baton's retry replays it, carrying byte for byte the same files (a file
    re-encoded between two sends of one request would change its hash here)."""
    c = files_stack.client()
    result = c.wait(c.send_message("replayed-files", FLAKY, files=attachments()), timeout=60)
    assert result.reply == "Seen." and result.usage.attempts == 2
    first, replay = received_for(files_stack, FLAKY)
    assert first == EXPECTED and replay == first


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ([Attachment(PNG, "image/jpeg", "a.png")], "declared image/jpeg but its bytes are image/png"),
        ([Attachment(b"<svg/>", "image/svg+xml", "a.svg")], "is not a supported type"),
        ([Attachment(PNG + bytes(400), "image/png", "big.png")], "over the limit of 300"),
        ([Attachment(PNG, "image/png")] * 21, "at most 20 files, not 21"),
    ],
)
def test_bad_files_are_refused_and_nothing_is_enqueued(files_stack, files, says):
    c = files_stack.client(BATON_MAX_FILE_BYTES="300")
    with pytest.raises(ValidationError, match=says):
        c.send_message("refused-files", "look", files=files)
    owner = keys.owner("chat", "refused-files")
    assert c.redis.exists(keys.turns(owner), keys.files(owner), keys.transcript(owner)) == 0


def baton(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tasks.cli", *args], cwd=REPO, env=stack.env, capture_output=True,
                          text=True, timeout=90)


def test_the_cli_attaches_files_and_refuses_a_bad_one_with_exit_2(files_stack, tmp_path: Path):
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "spec.pdf").write_bytes(PDF)
    (tmp_path / "notes.txt").write_text("plain text")
    out = baton(files_stack, "send", "cli-files", "cli look", "--file", str(tmp_path / "shot.png"),
                "--file", str(tmp_path / "spec.pdf"), "--wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "completed"
    assert received_for(files_stack, "cli look") == [EXPECTED]
    refused = baton(files_stack, "send", "cli-refused", "look", "--file", str(tmp_path / "notes.txt"))
    assert refused.returncode == 2 and "file 'notes.txt' is not a supported type" in refused.stderr
    missing = baton(files_stack, "send", "cli-refused", "look", "--file", str(tmp_path / "nowhere.png"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "nowhere.png" in missing.stderr
    assert files_stack.client().redis.exists(keys.turns(keys.owner("chat", "cli-refused"))) == 0


def get_bytes(api: ApiServer, path: str, token: str | None = TOKEN) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        conn.close()


def test_http_takes_files_in_the_body_and_serves_them_back(files_stack, api):
    body = {"text": "http look", "files": [
        {"media_type": "image/png", "data": base64.b64encode(PNG).decode(), "name": "shot.png"},
        {"media_type": "application/pdf", "data": base64.b64encode(PDF).decode(), "name": "spec.pdf"},
    ]}
    status, turn = api.post("/api/chats/http-files/messages", body)
    assert status == 202, turn
    c = files_stack.client()
    assert c.wait(c.send_message("http-files", "then?"), timeout=60).status == "completed"
    assert received_for(files_stack, "http look") == [EXPECTED, EXPECTED]
    assert get_bytes(api, f"/api/chats/http-files/files/{sha(PNG)}") == (200, "image/png", PNG)
    assert get_bytes(api, f"/api/chats/http-files/files/{sha(PDF)}") == (200, "application/pdf", PDF)
    assert get_bytes(api, f"/api/chats/http-files/files/{sha(PNG)}", token=None)[0] == 401
    assert get_bytes(api, f"/api/chats/other-chat/files/{sha(PNG)}")[0] == 404  # the file is its own chat's


def test_http_refuses_a_bad_file_with_422_and_enqueues_nothing(files_stack, api):
    bad = {"text": "look", "files": [{"media_type": "image/png", "data": base64.b64encode(PDF).decode()}]}
    status, answer = api.post("/api/chats/http-refused/messages", bad)
    assert status == 422 and "declared image/png but its bytes are application/pdf" in json.dumps(answer)
    status, answer = api.post("/api/chats/http-refused/messages", {"text": "x", "files": [
        {"media_type": "image/png", "data": "not base64!"}]})
    assert status == 422 and "not valid base64" in json.dumps(answer)
    owner = keys.owner("chat", "http-refused")
    assert files_stack.client().redis.exists(keys.turns(owner), keys.files(owner)) == 0


def test_usechat_file_parts_reach_the_provider_and_the_history_serves_them(files_stack, api, tmp_path: Path):
    """tests/js/files.test.mjs: the AI SDK's `sendMessage({text, files})`, then the stored history's file parts."""
    node = node_or_skip()
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "spec.pdf").write_bytes(PDF)
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, "BATON_URL": api.url, "BATON_TOKEN": TOKEN, "BATON_RUN": run, "BATON_FILES": str(tmp_path)}
    out = subprocess.run([node, "--test", "files.test.mjs"], cwd=JS, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert received_for(files_stack, "usechat look") == [EXPECTED]
    owner = keys.owner("chat", f"{run}-usechat-refused")
    assert files_stack.client().redis.exists(keys.turns(owner), keys.files(owner)) == 0


def test_deleting_the_chat_deletes_its_files(files_stack):
    c = files_stack.client()
    c.wait(c.send_message("deleted-files", "keep these", files=attachments()), timeout=60)
    owner = keys.owner("chat", "deleted-files")
    assert c.redis.hlen(keys.files(owner)) == 2
    assert c.delete("deleted-files")["deleted"] is True
    assert c.redis.exists(keys.files(owner)) == 0


def test_a_turn_drained_mid_stream_is_resent_with_the_same_bytes_by_another_worker(files_stack):
    """The first request stalls; its worker drains (SIGTERM), another worker takes the turn over and sends the
    request again: the same files, byte for byte, read from the store by a process that never had them."""
    c = files_stack.client()
    before = files_stack.fake_api.request_count
    ref = c.send_message("drained-files", DRAINED, files=attachments())
    assert files_stack.fake_api.wait_for_requests(before + 1, timeout=30)
    [draining] = [w for w in files_stack.workers if w.name == "w1"]
    files_stack.worker("w2", concurrency=1)  # the module's worker from here on
    draining.terminate()
    draining.wait_exit(timeout=15)
    result = c.wait(ref, timeout=60)
    assert result.status == "completed" and result.reply == "Seen."
    first, resent = received_for(files_stack, DRAINED)
    assert first == EXPECTED and resent == first


def test_a_chat_without_tools_elides_its_old_screenshots_and_keeps_the_latest(files_stack):
    """Three turns of one tool-less chat, each with a 1000x1000 screenshot (1,333 tokens as Anthropic counts it)
    under a 3,000-token context budget: the second request still carries both, the third elides the finished
    turns' screenshots and keeps the person's latest (a cut that stopped at the last tool round never moved here)."""
    queue = f"{files_stack.queue}-small"
    files_stack.worker("w-small", concurrency=1, BATON_QUEUE=queue, BATON_CONTEXT_TOKENS="3000")
    c = files_stack.client(BATON_QUEUE=queue)
    shots = [png(1000, 1000, seed) for seed in (1, 2, 3)]
    for n, shot in enumerate(shots):
        sent = c.send_message("no-tools-shots", f"screen {n}", files=[Attachment(shot, "image/png")])
        assert c.wait(sent, timeout=60).status == "completed"
    images = [[f["sha256"] for f in got if f["type"] == "image"]
              for body, got in zip(files_stack.fake_api.requests, files_stack.fake_api.files_received(), strict=True)
              if first_user_text(body).startswith("screen 0")]
    assert images == [[sha(shots[0])], [sha(shots[0]), sha(shots[1])], [sha(shots[2])]]
