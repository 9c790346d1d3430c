"""Attachments: the clients' checks (as ValidationError), the useChat file part, the history's file parts."""

from __future__ import annotations

import base64

import pytest

from agent.messages import Message, TextBlock, user_text
from agent.messages.media import digest, file_block
from tasks.client.attachments import Attachment, check_attachments
from tasks.client.core import ValidationError
from web.ui_messages import history, turns_of
from web.ui_request import Send, asked

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.7\n" + b"\x00" * 32


def test_checked_files_become_blocks_and_each_hash_is_stored_once(tmp_path):
    (tmp_path / "shot.png").write_bytes(PNG)
    shot = Attachment.from_path(tmp_path / "shot.png")
    assert (shot.media_type, shot.name) == ("image/png", "shot.png")
    checked = check_attachments([shot, shot, Attachment(PDF, "application/pdf")], None)
    assert [b.type for b in checked.blocks] == ["image", "image", "document"]
    assert checked.contents == ((digest(PNG), PNG), (digest(PDF), PDF))
    assert check_attachments(None, None).blocks == ()


def test_a_refused_file_is_a_validation_error_naming_it():
    with pytest.raises(ValidationError, match=r"file 'a\.png' is declared image/png but its bytes are application/pdf"):
        check_attachments([Attachment(PDF, "image/png", "a.png")], None)
    with pytest.raises(ValidationError, match="at most 20 files"):
        check_attachments([Attachment(PNG, "image/png")] * 21, None)
    with pytest.raises(ValidationError, match="not valid base64"):
        Attachment.from_base64("***", "image/png")


def test_a_usechat_file_part_is_an_attachment():
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    message = {"role": "user", "parts": [
        {"type": "text", "text": "look"}, {"type": "file", "mediaType": "image/png", "url": url, "filename": "s.png"},
    ]}
    assert asked("submit-message", [message]) == Send("look", (Attachment(PNG, "image/png", "s.png"),))
    message["parts"][1]["url"] = "https://example.com/s.png"
    with pytest.raises(ValueError, match="base64 data URL"):
        asked("submit-message", [message])


def test_the_history_gives_a_users_files_as_file_parts_served_by_the_files_route():
    image = file_block(PNG, "image/png", "s.png")
    transcript = [user_text("look", "t-1", (image,)),
                  Message(role="assistant", content=(TextBlock(text="ok"),), turn_id="t-1")]
    user = history(turns_of(transcript, []), "c1")[0]
    assert user["parts"] == [
        {"type": "text", "text": "look"},
        {"type": "file", "mediaType": "image/png", "url": f"/api/chats/c1/files/{image.sha256}", "filename": "s.png"},
    ]


def test_resending_a_failed_turns_message_retries_it_only_with_the_same_files():
    """`send_message` retries the chat's failed last turn when its message is repeated: the same text and the same
    files in the same order; other files make it a new message."""
    from tasks.client.core import same_message
    from tasks.store.records import UnitRecord

    image, pdf = file_block(PNG, "image/png"), file_block(PDF, "application/pdf")
    last = UnitRecord(kind="turn", owner_id="chat:c", unit_id="t-1", text="look", files=[image, pdf])
    assert same_message(last, "look", (image, pdf))
    assert not same_message(last, "look", (image,))
    assert not same_message(last, "look", (pdf, image))
    assert not same_message(last, "other", (image, pdf))
    assert UnitRecord.from_hash(last.to_hash()) == last  # the record keeps its files' blocks
