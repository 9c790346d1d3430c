"""Images out of tools, through real workers and the real SDKs against the fakes (which check each image's bytes
against its declared type, as the APIs do): a Python tool's image reaches both providers byte for byte (Anthropic:
inside its tool_result; Chat Completions: in a user message after the tool messages) on every send of a request,
a replayed step's included; the transcript and journal hold only its reference; an MCP server's images, links,
resources and structured content reach the model (an `mcp` SDK server, and `@modelcontextprotocol/server-everything`
run from npm as a user would)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tasks.store import keys
from tests.conftest import PROVIDERS, Stack
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text, tool_call
from tests.support.fake_openai import FakeChatServer
from tests.support.image_tools import heavy_bytes, screenshot_bytes
from tests.support.images import sha
from tests.support.mcp_image_server import PICTURE
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

IMAGES = {"BATON_TOOLS": "tests.support.image_tools:TOOLS"}
STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
NPM_CACHE = Path(os.environ.get("BATON_TEST_NPM_CACHE", Path.home() / ".cache" / "baton-tests" / "npm"))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def holders(r: redis.Redis, needle: str) -> set[str]:
    """Every key of the store whose value holds `needle` (strings, hashes, lists, streams)."""
    found = set()
    for raw in r.scan_iter(count=1000):
        name = raw.decode()
        kind = r.type(raw).decode()
        if kind == "string":
            values = [r.get(raw)]
        elif kind == "hash":
            values = list(r.hgetall(raw).values())
        elif kind == "list":
            values = r.lrange(raw, 0, -1)
        elif kind == "stream":
            values = [v for _, fields in r.xrange(raw) for v in fields.values()]
        else:
            continue
        if any(needle.encode() in (v or b"") for v in values):
            found.add(name)
    return found


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_python_tools_image_reaches_the_model_byte_exact_and_is_stored_by_reference(stack: Stack, provider):
    """`screenshot` returns a text and an `Image`: the next request carries the PNG's exact bytes (Anthropic: inside
    the tool_result; Chat Completions: a user message after the tool message, which has the text); the stream of that
    request breaks and its retry carries the same bytes; the transcript holds the image's reference, and the bytes
    are in the chat's file store and nowhere else in Redis."""
    fake = stack.fake_api
    png = screenshot_bytes("home")
    fake.set_handler(Script([tool_call("screenshot", {"page": "home"}),
                             failing(Fault("drop", after_events=5), like=text("Seen it.")), text("Seen it.")]))
    stack.worker("w1", **IMAGES)
    client = stack.client()
    result = client.wait(client.send_message("shot-1", "look at home"), timeout=60)
    assert (result.status, result.reply) == ("completed", "Seen it."), result
    assert fake.rejections == [] and fake.request_count == 3
    assert fake.images(0) == [] and fake.images(1) == fake.images(2) == [sha(png)]

    if isinstance(fake, FakeChatServer):
        messages = fake.wire_requests[1]["messages"]
        tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
        assert messages[tool_at]["content"] == "screenshot of home"
        after = messages[tool_at + 1]
        assert after["role"] == "user" and after["content"][1] == {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(png)}"}}
        assert fake.wire_requests[1]["messages"] == fake.wire_requests[2]["messages"]
    else:
        [result_block] = fake.requests[1]["messages"][-1]["content"]
        assert result_block["content"] == [
            {"type": "text", "text": "screenshot of home"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(png)}},
        ]
        assert fake.requests[1]["messages"] == fake.requests[2]["messages"]

    answered = client.transcript("shot-1")[2].tool_results[0]
    assert answered.content[1].model_dump() == {
        "type": "image", "media_type": "image/png", "sha256": sha(png), "bytes": len(png), "name": "home.png"}
    r = redis.Redis.from_url(stack.redis_server.url)
    owner = keys.owner("chat", "shot-1")
    assert r.hget(keys.files(owner), sha(png)) == _b64(png).encode()
    assert holders(r, _b64(png)[:200]) == {keys.files(owner)}  # not in the transcript, the journal nor an event


def test_images_count_in_the_budget_and_the_cap_as_the_model_counts_them(stack: Stack):
    """Under `BATON_CONTEXT_TOKENS=16000` (a result's cap: 8000 characters) a tool returns two 300 KB screenshots of
    1334 tokens each: the first fits the cap and the request (its base64 alone would be ~107,000 tokens), the second
    is left out, and the result says so."""
    fake = stack.fake_api
    fake.set_handler(Script([tool_call("heavy_screenshots", {"count": 2}), text("One page.")]))
    stack.worker("w1", BATON_CONTEXT_TOKENS="16000", **IMAGES)
    client = stack.client()
    result = client.wait(client.send_message("heavy", "shoot two pages"), timeout=60)
    assert (result.status, result.reply) == ("completed", "One page."), result
    assert fake.rejections == [] and fake.images(1) == [sha(heavy_bytes(0))]
    told = [p["text"] for p in fake.requests[1]["messages"][-1]["content"][0]["content"] if p["type"] == "text"]
    assert told == ["2 screenshots", "[image page1.png left out: over the result cap of 8000 characters]"]


def test_a_step_replayed_by_another_worker_sends_the_same_bytes(stack: Stack):
    """The tool step is journaled (holding the image's reference only) and the next model request stalls; the worker
    drains: the other worker (its own process, its file cache empty) replays the step from the journal and sends the
    same image bytes, read from the store."""
    fake = stack.fake_api
    png = screenshot_bytes("about")
    fake.set_handler(Script([tool_call("screenshot", {"page": "about"}), STALL, text("Seen.")]))
    worker_a = stack.worker("a", concurrency=1, **IMAGES)
    client = stack.client()
    ref = client.send_message("shot-2", "look at about")
    assert fake.wait_for_requests(2, timeout=30)
    r = redis.Redis.from_url(stack.redis_server.url)
    owner = keys.owner("chat", "shot-2")
    step = f"tool:{_call_id(fake.requests[1])}"
    assert any(r.hexists(k, step) for k in r.scan_iter(match="*:journal:*"))
    assert holders(r, _b64(png)[:200]) == {keys.files(owner)}  # the journaled step holds only the reference
    worker_a.terminate()
    assert worker_a.wait_exit(timeout=20) == 0
    stack.worker("b", **IMAGES)
    result = client.wait(ref, timeout=60)
    assert (result.status, result.reply) == ("completed", "Seen."), result
    assert fake.rejections == [] and fake.request_count >= 3
    assert [fake.images(i) for i in range(1, fake.request_count)] == [[sha(png)]] * (fake.request_count - 1)


def _call_id(body: dict) -> str:
    return next(b["tool_use_id"] for b in body["messages"][-1]["content"] if b.get("type") == "tool_result")


def _servers_file(stack: Stack, servers: dict) -> str:
    path = stack.tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def test_an_mcp_sdk_servers_image_link_resource_and_structured_content_reach_the_model(stack: Stack):
    """A real `mcp` SDK server (tests/support/mcp_image_server.py): its image reaches the model as an image, its
    resource link as its name, URI and description, its embedded resource as its text; a result of structured
    content only as its JSON."""
    fake = stack.fake_api
    pictures = {"command": sys.executable, "args": ["-m", "tests.support.mcp_image_server"],
                "env": {"PYTHONPATH": str(REPO)}}
    calls = Reply([{"type": "tool_use", "id": "toolu_p", "name": "pictures__picture", "input": {}},
                   {"type": "tool_use", "id": "toolu_m", "name": "pictures__measure", "input": {}}])
    fake.set_handler(Script([calls, text("A picture.")]))
    stack.worker("w1", BATON_MCP_SERVERS=_servers_file(stack, {"pictures": pictures}))
    client = stack.client()
    result = client.wait(client.send_message("mcp-img", "draw"), timeout=60)
    assert (result.status, result.reply) == ("completed", "A picture."), result
    assert fake.rejections == []
    picture, measure = fake.requests[1]["messages"][-1]["content"]
    assert picture["content"] == [
        {"type": "text", "text": "a picture"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(PICTURE)}},
        {"type": "text", "text": "[resource link] source.svg: file:///pictures/source.svg\nThe picture's source"},
        {"type": "text", "text": "drawn at dawn"},
    ]
    assert measure["content"] == '{"width": 8, "height": 6}'


@pytest.fixture(scope="module")
def everything() -> dict:
    """`server-everything` as a user's servers file runs it (`npx -y`), its package fetched into a cache first (a
    server has 20 s to start, and the first fetch can take longer)."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed (Debian: apt-get install npm)")
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "npm_config_cache": str(NPM_CACHE), "npm_config_update_notifier": "false"}
    try:  # it serves stdio until its stdin closes: with none, it starts and ends
        subprocess.run([npx, "-y", EVERYTHING], stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=240,
                       check=True)
    except (subprocess.SubprocessError, OSError) as err:
        pytest.skip(f"{EVERYTHING} cannot be fetched from npm here: {err}")
    return {"command": npx, "args": ["-y", EVERYTHING],
            "env": {"npm_config_cache": str(NPM_CACHE), "npm_config_update_notifier": "false"}}


@pytest.mark.timeout(300)  # its module fixture may fetch the package from npm first
def test_server_everythings_tiny_image_and_resource_links_reach_the_model(stack: Stack, everything: dict):
    """The reference server, from npm: `get-tiny-image`'s PNG reaches the model as an image (not `[image content]`),
    `get-resource-links`' links keep their URIs."""
    fake = stack.fake_api
    calls = Reply([{"type": "tool_use", "id": "toolu_i", "name": "everything__get-tiny-image", "input": {}},
                   {"type": "tool_use", "id": "toolu_l", "name": "everything__get-resource-links",
                    "input": {"count": 2}}])
    fake.set_handler(Script([calls, text("Got them.")]))
    stack.worker("w1", BATON_MCP_SERVERS=_servers_file(stack, {"everything": everything}))
    client = stack.client()
    result = client.wait(client.send_message("everything", "show me"), timeout=90)
    assert (result.status, result.reply) == ("completed", "Got them."), result
    assert fake.rejections == []
    image, links = fake.requests[1]["messages"][-1]["content"]
    [png] = [p for p in image["content"] if p["type"] == "image"]
    assert png["source"]["media_type"] == "image/png"
    assert base64.b64decode(png["source"]["data"]).startswith(b"\x89PNG") and len(fake.images(1)) == 1
    told = "\n".join(p["text"] for p in links["content"]) if isinstance(links["content"], list) else links["content"]
    assert "demo://resource/dynamic/text/2" in told and "[resource_link content]" not in told
