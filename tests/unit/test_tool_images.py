"""Images out of tools: `Image` returns, results of text and images, their cap, their wire form, their journal."""

from __future__ import annotations

import base64

import pytest

from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig
from agent.loop.memory_edge import MemoryEdge
from agent.loop.policy import Backoff, Driver
from agent.loop.state import LoopState
from agent.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    dump_message,
    load_message,
    result_text,
    to_api,
)
from agent.messages.media import ImageBlock, image_tokens
from agent.tools import Image, by_name, execute, tool
from agent.tools.capping import cap_content
from agent.tools.round import run_round
from tests.support.images import png, sha

PNG = png(30, 20)


@tool
def shot(label: str) -> list[str | Image]:
    """Take a screenshot."""
    return [f"the {label}", Image(PNG, "image/png", name="shot.png")]


def test_a_tool_returning_images_gives_text_and_references_and_the_bytes_beside() -> None:
    outcome = execute(shot, {"label": "page"})
    assert not outcome.is_error
    assert outcome.content == (
        TextBlock(text="the page"),
        ImageBlock(media_type="image/png", sha256=sha(PNG), bytes=len(PNG), name="shot.png"),
    )
    assert outcome.files == {sha(PNG): PNG}


def test_an_image_is_typed_by_its_bytes() -> None:
    @tool
    def liar() -> list[str | Image]:
        """Say a PNG is a JPEG."""
        return [Image(PNG, "image/jpeg")]

    @tool
    def pdf() -> list[str | Image]:
        """Return a PDF as an image."""
        return [Image(b"%PDF-1.4 ...")]

    said = execute(liar, {})
    assert said.is_error and "declared image/jpeg but its bytes are image/png" in str(said.content)
    assert execute(pdf, {}).is_error and "as an image" in str(execute(pdf, {}).content)


def test_a_list_without_images_is_the_json_it_always_was() -> None:
    @tool
    def names() -> list[str]:
        """Names."""
        return ["a", "b"]

    assert execute(names, {}).content == '["a", "b"]'


def test_an_image_costs_what_anthropic_counts() -> None:
    assert image_tokens(png(750, 1)) == 1
    assert image_tokens(png(200, 150)) == 40  # 30,000 pixels / 750
    assert image_tokens(png(3136, 1568)) == image_tokens(png(1516, 758))  # scaled down to ~1.15 MP first
    assert image_tokens(b"no image") == 1534  # unreadable: the most an image can cost


def test_the_cap_spends_on_images_first_and_leaves_out_what_does_not_fit() -> None:
    big, small = png(200, 150, seed=1), png(30, 20, seed=2)  # 40 and 1 tokens: 160 and 4 characters
    parts = (
        TextBlock(text="x" * 1000),
        ImageBlock(media_type="image/png", sha256=sha(big), bytes=len(big)),
        ImageBlock(media_type="image/png", sha256=sha(small), bytes=len(small)),
    )
    files = {sha(big): big, sha(small): small}
    capped = cap_content(parts, 600, files)
    assert isinstance(capped, tuple)
    assert capped[1] == parts[1] and capped[2] == parts[2]  # both fit: 164 of 600
    assert isinstance(capped[0], TextBlock) and len(capped[0].text) == 600 - 164
    tight = cap_content(parts, 100, files)
    assert isinstance(tight, tuple) and parts[1] not in tight and parts[2] in tight
    assert "left out: over the result cap of 100 characters" in result_text(tight)
    assert cap_content(tight, 100, files) == tight  # capping composes


def test_a_result_with_images_goes_as_content_blocks_read_through_the_file_source() -> None:
    image = ImageBlock(media_type="image/png", sha256=sha(PNG), bytes=len(PNG), name="shot.png")
    message = Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content=(TextBlock(text="t"), image)),))
    stored = dump_message(message)
    assert base64.b64encode(PNG).decode() not in stored
    assert load_message(stored) == message

    class Files:
        def base64(self, sha256: str) -> str | None:
            return base64.b64encode(PNG).decode() if sha256 == sha(PNG) else None

    [sent] = to_api([message], files=Files())
    data = base64.b64encode(PNG).decode()
    assert sent["content"] == [{"type": "tool_result", "tool_use_id": "c1", "content": [
        {"type": "text", "text": "t"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
    ]}]


def test_an_old_text_result_still_loads_as_text() -> None:
    raw = '{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"done"}]}'
    loaded = load_message(raw)
    assert loaded is not None and loaded.tool_results[0].content == "done"


def _config() -> LoopConfig:
    return LoopConfig(owner_id="chat:1", turn_id="t1", driver=Driver.CHAT_TURN, model="m", max_rounds=5,
                      retry_budget=1, backoff=Backoff())


def test_the_round_stores_the_bytes_before_the_result_and_journals_only_the_reference() -> None:
    edge = MemoryEdge()
    order: list[str] = []
    keep, record = edge.keep_files, edge.record
    edge.keep_files = lambda files: (order.append("files"), keep(files))[1]  # type: ignore[method-assign]
    edge.record = lambda *a, **k: (order.append("record"), record(*a, **k))[1]  # type: ignore[method-assign]
    call = ToolUseBlock(id="c1", name="shot", input={"label": "page"})
    [result] = run_round((call,), LoopState(), by_name([shot]), edge, CancelToken(), _config())
    assert order == ["files", "record"]
    assert edge.files == {sha(PNG): PNG}
    recorded = edge.steps["tool:c1"]
    assert base64.b64encode(PNG).decode() not in str(recorded)
    assert recorded["content"][1] == {"type": "image", "media_type": "image/png", "sha256": sha(PNG),
                                      "bytes": len(PNG), "name": "shot.png"}  # fmt: skip
    # A replay answers from the journal: the same result, nothing run, nothing stored again.
    edge.files.clear()
    [again] = run_round((call,), LoopState(), by_name([shot]), edge, CancelToken(), _config())
    assert again == result and edge.files == {}


@pytest.mark.parametrize("value", ["plain", ["a", "b"]])
def test_a_text_result_is_journaled_as_text(value: object) -> None:
    @tool
    def say() -> object:
        """Say it."""
        return value

    edge = MemoryEdge()
    run_round((ToolUseBlock(id="c1", name="say", input={}),), LoopState(), by_name([say]), edge, CancelToken(),
              _config())
    assert isinstance(edge.steps["tool:c1"]["content"], str) and edge.files == {}


def test_the_context_budget_counts_an_image_as_the_model_does_not_as_its_base64() -> None:
    from agent.history.context import elide, estimate_tokens

    heavy = png(1000, 1000) + bytes(range(256)) * 1200  # ~300 KB: the header says 1000 x 1000 (1334 tokens)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(heavy)
                                         .decode()}}  # fmt: skip
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                           "content": [{"type": "text", "text": "shot"}, image]}]}  # fmt: skip
    without = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                            "content": [{"type": "text", "text": "shot"}]}]}  # fmt: skip
    assert estimate_tokens(result) - estimate_tokens(without) == image_tokens(heavy) + 20  # + the block's keys
    assert estimate_tokens({"role": "user", "content": [image]}) < image_tokens(heavy) + 40  # a user's image too
    [elided] = elide([result], 1)
    assert elided["content"][0]["content"] == (
        "[Old tool result elided to fit the context window (4 characters, 1 images).]")
    assert estimate_tokens(elided) <= 40


def test_the_fakes_refuse_images_as_the_apis_do_and_tell_which_a_request_carried() -> None:
    from tests.support.fake_anthropic_sse import images_of, validate_request
    from tests.support.fake_openai import neutral_body, validate_chat

    data = base64.b64encode(PNG).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    lying = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": data}}
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [image]}]}
    assert validate_request(body) is None and images_of(body) == [sha(PNG)]
    body["messages"][0]["content"] = [lying]
    assert "Image does not match the provided media type image/jpeg" in str(validate_request(body))

    url = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    calls = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    in_tool = {"model": "m", "messages": [{"role": "user", "content": "hi"}, calls,
                                          {"role": "tool", "tool_call_id": "c1", "content": [url]}]}  # fmt: skip
    refused = validate_chat(in_tool)
    assert refused is not None and "only allowed for messages with role 'user'" in refused[0]
    after = {**in_tool, "messages": [*in_tool["messages"][:2], {"role": "tool", "tool_call_id": "c1", "content": "t"},
                                     {"role": "user", "content": [url]}]}  # fmt: skip
    assert validate_chat(after) is None and images_of(neutral_body(after)) == [sha(PNG)]
