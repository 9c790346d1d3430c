"""File blocks: types read from bytes, limits, references in the transcript, bytes only in requests."""

from __future__ import annotations

import base64

import pytest

from agent.messages import Message, dump_message, load_message, to_api, user_text
from agent.messages.media import (
    IMAGE_LIMIT,
    MAX_FILES,
    DocumentBlock,
    FileRefused,
    ImageBlock,
    check_count,
    check_file,
    digest,
    file_block,
    limit,
    sniff,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32
GIF = b"GIF89a" + b"\x00" * 32
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 32
PDF = b"%PDF-1.7\n" + b"\x00" * 32


@pytest.mark.parametrize(
    ("data", "kind"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp"), (PDF, "application/pdf")],
)
def test_the_type_is_read_from_the_bytes(data: bytes, kind: str) -> None:
    assert sniff(data) == kind
    assert check_file(data, None) == kind
    assert check_file(data, kind.upper()) == kind  # a declared type is compared without case


def test_a_declared_type_must_agree_with_the_bytes() -> None:
    with pytest.raises(FileRefused, match="declared image/png but its bytes are image/jpeg"):
        check_file(JPEG, "image/png", "shot.png")


def test_types_a_message_cannot_carry_are_refused() -> None:
    for data in (b"hello", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"PK\x03\x04zip", b""):
        with pytest.raises(FileRefused, match="not a supported type"):
            check_file(data, None, "x")


def test_the_limit_is_the_lower_of_the_setting_and_the_providers() -> None:
    assert limit("image/png") == IMAGE_LIMIT
    assert limit("application/pdf") == 20 * 1024 * 1024
    assert limit("image/png", 1000) == 1000
    assert limit("image/png", 10**12) == IMAGE_LIMIT  # a setting cannot raise the provider's limit
    with pytest.raises(FileRefused, match="has 40 bytes, over the limit of 39"):
        check_file(PNG, None, max_bytes=39)
    assert check_file(PNG, None, max_bytes=len(PNG)) == "image/png"


def test_a_message_carries_at_most_twenty_files() -> None:
    check_count(MAX_FILES)
    with pytest.raises(FileRefused, match="at most 20 files, not 21"):
        check_count(MAX_FILES + 1)


def test_the_transcript_holds_a_reference_and_the_request_the_bytes() -> None:
    image, pdf = file_block(PNG, "image/png", "shot.png"), file_block(PDF, "application/pdf", "spec.pdf")
    assert isinstance(image, ImageBlock) and isinstance(pdf, DocumentBlock)
    message = user_text("look", files=(image, pdf))
    stored = dump_message(message)
    assert base64.b64encode(PNG).decode() not in stored  # the bytes never enter the transcript
    assert load_message(stored) == message
    assert image.model_dump() == {
        "type": "image", "media_type": "image/png", "sha256": digest(PNG), "bytes": len(PNG), "name": "shot.png",
    }

    class Files:
        def base64(self, sha256: str) -> str | None:
            return {digest(PNG): base64.b64encode(PNG).decode()}.get(sha256)

    [sent] = to_api([message], files=Files())
    png = base64.b64encode(PNG).decode()
    assert sent["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "text", "text": "[document spec.pdf is no longer available]"},
    ]


def test_a_message_of_an_older_version_still_loads() -> None:
    old = Message(role="user", content=user_text("hi").content)
    assert load_message(dump_message(old)) == old


def test_chat_completions_carries_files_as_parts_and_tool_images_after_the_tool_messages() -> None:
    from agent.provider.base import ProviderRequest
    from agent.provider.openai_request import chat_messages

    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "UE5H"}}
    pdf = {"type": "document", "title": "spec.pdf", "source": {"type": "base64", "media_type": "application/pdf",
                                                               "data": "UERG"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look"}, png, pdf]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "shot", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "here"}, png]},
        ]},
    ]
    out = chat_messages(ProviderRequest(model="m", messages=messages))
    assert out[0] == {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}},
        {"type": "file", "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,UERG"}},
    ]}
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": "here"}
    assert out[3] == {"role": "user", "content": [
        {"type": "text", "text": "[images from tool call c1]"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}},
    ]}
