"""An MCP tool's result as the model gets it: images as images, links and resources as text, structured content."""

from __future__ import annotations

import base64

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from agent.tools import Image
from agent.tools.mcp.results import result_text, result_value
from tests.support.images import png

PNG = png(4, 3)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_an_image_reaches_the_model_as_an_image_typed_by_its_bytes() -> None:
    value = result_value(CallToolResult(content=[
        TextContent(type="text", text="here it is"),
        ImageContent(type="image", data=_b64(PNG), mime_type="image/jpeg"),  # declared wrong: the bytes decide
    ]))
    assert value == ["here it is", Image(PNG)]


def test_what_is_no_image_a_model_takes_is_told_as_text() -> None:
    svg = ImageContent(type="image", data=_b64(b"<svg/>"), mime_type="image/svg+xml")
    broken = ImageContent(type="image", data="not base64!", mime_type="image/png")
    assert result_value(CallToolResult(content=[svg, broken])) == (
        "[image content (image/svg+xml): not an image type a model takes (PNG, JPEG, GIF, WebP)]\n"
        "[image content (image/png): not valid base64]"
    )


def test_links_and_embedded_resources_keep_what_the_model_can_use() -> None:
    link = ResourceLink(type="resource_link", uri="file:///tmp/a.txt", name="a.txt", description="The first file",
                        mime_type="text/plain")
    text = EmbeddedResource(type="resource", resource=TextResourceContents(uri="mem://n", text="note body"))
    blob = EmbeddedResource(type="resource", resource=BlobResourceContents(uri="mem://b", blob=_b64(b"\x00"),
                                                                           mime_type="application/octet-stream"))
    audio = AudioContent(type="audio", data=_b64(b"RIFF"), mime_type="audio/wav")
    assert result_value(CallToolResult(content=[link, text, blob, audio])) == (
        "[resource link] a.txt: file:///tmp/a.txt (text/plain)\nThe first file\n"
        "note body\n"
        "[embedded resource mem://b (application/octet-stream), binary]\n"
        "[audio content]"
    )


def test_structured_content_is_json_text_only_when_the_server_gave_no_text() -> None:
    only = CallToolResult(content=[], structured_content={"n": 1, "s": "é"})
    assert result_value(only) == '{"n": 1, "s": "é"}'
    with_text = CallToolResult(content=[TextContent(type="text", text='{"n": 1}')], structured_content={"n": 1})
    assert result_value(with_text) == '{"n": 1}'
    with_image = CallToolResult(content=[ImageContent(type="image", data=_b64(PNG), mime_type="image/png")],
                                structured_content={"w": 4})
    assert result_value(with_image) == [Image(PNG), '{"w": 4}']


def test_an_error_result_is_its_text_with_images_named() -> None:
    failed = CallToolResult(is_error=True, content=[TextContent(type="text", text="bad"),
                                                    ImageContent(type="image", data=_b64(PNG), mime_type="image/png")])
    assert result_text(failed) == "bad\n[image]"
