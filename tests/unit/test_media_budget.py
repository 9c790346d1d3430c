"""What a user's file counts in the context budget (a PDF by its pages; images as tests/unit of the tool images
show, width * height / 750), and old files of finished turns elided within the cut like old tool results."""

from __future__ import annotations

import base64
import struct
import zlib

from agent.history.context import choose_cut, elide, estimate_tokens
from agent.messages.media import PDF_PAGE_TOKENS, document_tokens, pdf_pages


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


def test_a_pdf_counts_by_its_pages():
    pdf = b"%PDF-1.4\n1 0 obj<</Type /Pages>>\n2 0 obj<</Type /Page>>\n3 0 obj<</Type/Page>>\n"
    assert pdf_pages(pdf) == 2 and pdf_pages(b"%PDF-1.4") == 1
    assert document_tokens(pdf) == 2 * PDF_PAGE_TOKENS


def block(kind: str, media_type: str, data: bytes) -> dict:
    return {"type": kind, "source": {"type": "base64", "media_type": media_type,
                                     "data": base64.b64encode(data).decode()}}


def test_a_users_image_and_pdf_count_as_their_tokens_not_as_their_base64():
    """A 500 KB screenshot read as base64 is ~170,000 tokens, a 1 MB PDF ~350,000: far past the window. Counted as
    the provider counts them, a 1280x800 screenshot is 1366 tokens and a one-page PDF 3,000, whatever their size."""
    shot = png(1280, 800) + b"\x00" * 500_000
    pdf = b"%PDF-1.4\n1 0 obj<</Type /Page>>\n" + b"\x00" * 1_000_000
    message = {"role": "user", "content": [{"type": "text", "text": "look"}, block("image", "image/png", shot),
                                           block("document", "application/pdf", pdf)]}
    assert 1366 + PDF_PAGE_TOKENS <= estimate_tokens(message) < 1366 + PDF_PAGE_TOKENS + 100


def tool_round(n: int) -> list[dict]:
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "shot", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * 4000}]}
    return [call, result]


def test_old_files_of_finished_turns_are_elided_within_the_cut_and_the_turn_under_way_keeps_its_own():
    old = {"role": "user", "content": [{"type": "text", "text": "first"}, block("image", "image/png", png(1000, 1000))]}
    now = {"role": "user", "content": [{"type": "text", "text": "now"}, block("image", "image/png", png(1000, 1000))]}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    messages = [old, *tool_round(1), answer, now, *tool_round(2)]
    out = elide(messages, len(messages) - 1)
    assert out[0]["content"][1] == {"type": "text", "text": "[Old image image/png elided to fit the context window.]"}
    assert out[4] == now  # the person's latest message keeps its image
    assert messages[0]["content"][1]["type"] == "image"  # the input is left as it was
    fit = choose_cut(0, messages, current=0, budget=100, target=0)
    assert fit.cut == len(messages) - 1
    assert fit.tokens == sum(estimate_tokens(m) for m in elide(messages, fit.cut))


def jpeg(width: int, height: int, exif: int = 0) -> bytes:
    """A JPEG's markers: an APP1 segment of `exif` bytes, then the frame header that holds its size."""
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + b"\x00" * exif
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app1 + sof + b"\xff\xd9"


def test_an_images_size_is_read_from_its_head_and_from_the_whole_file_when_the_head_does_not_say():
    from agent.messages.media import image_tokens, image_tokens_b64

    shot = png(1280, 800) + b"\x00" * 500_000
    assert image_tokens_b64(base64.b64encode(shot).decode()) == image_tokens(shot) == 1366
    late = jpeg(1000, 1000, exif=60_000)  # its frame header 60 KB in: past the head
    assert image_tokens_b64(base64.b64encode(late).decode()) == image_tokens(late) == 1334
