"""The one cap seam: every tool result, whatever produced it, passes through here before it re-enters a prompt.

A text result is cut to a number of characters, head and tail kept (`cap_result`). A result with images
(`cap_content`) spends the same allowance on them first, each at what it costs the model (its tokens, as
characters at the context budget's rate): an image that no longer fits is left out and said to be, and the
text parts share what remains, in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.messages import ResultPart, TextBlock, ToolContent
from agent.messages.media import ImageBlock, image_tokens

RESULT_CAP_CHARS = 16_000
CHARS_PER_TOKEN = 4  # the context budget's rate (agent/history/context.py: BYTES_PER_TOKEN)
MIN_TEXT_CHARS = 200  # what a text part keeps however much its images took: enough to say what it is


def image_chars(block: ImageBlock, files: Mapping[str, bytes]) -> int:
    """What an image takes of a result's cap: its tokens at the budget's rate; 0 when its bytes are not at hand
    (a result capped before, as a deduplicated read's is)."""
    data = files.get(block.sha256)
    return 0 if data is None else image_tokens(data) * CHARS_PER_TOKEN


def cap_content(content: ToolContent, limit: int, files: Mapping[str, bytes]) -> ToolContent:
    """A result within `limit`: a text as `cap_result` cuts it; images first, in order, while they fit, then each
    text part capped to what is left. Idempotent: a capped result passes through unchanged."""
    if isinstance(content, str):
        return cap_result(content, limit)
    left = limit
    placed: list[ResultPart] = []
    for part in content:
        if isinstance(part, ImageBlock):
            cost = image_chars(part, files)
            if cost > left:
                label = part.name or part.sha256[:12]
                placed.append(TextBlock(text=f"[image {label} left out: over the result cap of {limit} characters]"))
                continue
            left -= cost
        placed.append(part)
    out: list[ResultPart] = []
    for part in placed:
        if isinstance(part, TextBlock):
            text = cap_result(part.text, max(MIN_TEXT_CHARS, left))
            left = max(0, left - len(text))
            part = part if text == part.text else TextBlock(text=text)
        out.append(part)
    return tuple(out)


def cap_result(text: str, limit: int = RESULT_CAP_CHARS) -> str:
    """The one seam every tool result passes through before it re-enters a prompt.

    Over `limit`, the head (three quarters of what fits) and the tail (the rest) are kept and the cut is
    marked between them: a command's exit status comes first and its last lines (where errors land) last.
    The result is at most `limit` characters, marker included, and the marker counts exactly the characters
    of the original that are missing, so the model is never told less was cut than was.

    A result is capped more than once on its way to a prompt (by the tool's own output cap, by `execute`,
    when it is recorded, and again when a read is served from the dedup map), so capping composes: a capped
    result is within its limit and passes through unchanged, and one capped again to a smaller limit is cut
    as its original would have been, the earlier marker's count carried into the new one. The earlier
    marker is recognised only where this function puts it (the exact split a cap of that length makes).

    A limit too small for the marker itself (about 25 characters, never a real cap) keeps the head alone,
    unmarked: there is no room to say what was cut.
    """
    if len(text) <= limit:
        return text
    earlier = _earlier_cut(text)
    if earlier is None:
        head_of, cut_before, tail_of = text, 0, text
        total = len(text)
    else:
        head_of, cut_before, tail_of = earlier
        total = len(head_of) + cut_before + len(tail_of)
    keep = _kept(total, limit)
    if keep is None:
        return head_of[:limit]
    tail = keep // 4
    return head_of[: keep - tail] + _MARKER.format(cut=total - keep) + (tail_of[len(tail_of) - tail :] if tail else "")


_MARKER = "\n[… {cut} characters cut …]\n"
_MARKED = re.compile(r"\n\[… ([1-9][0-9]*) characters cut …\]\n")


def _kept(total: int, limit: int) -> int | None:
    """How many characters of a `total`-character original a cap to `limit` keeps (the marker takes the rest,
    so the result is exactly `limit` long); None when even the marker does not fit. The marker's length
    depends on its count's digits and the count on what is kept: the first digit count that agrees is taken
    (one always does; the first keeps the most)."""
    for digits in range(1, len(str(total)) + 2):
        keep = limit - len(_MARKER.format(cut="")) - digits
        if keep < 0:
            return None
        if len(str(total - keep)) == digits:
            return keep
    raise AssertionError("unreachable: some digit count always agrees")


def _earlier_cut(text: str) -> tuple[str, int, str] | None:
    """(head, characters cut, tail) when `text` is exactly what `cap_result` made of a longer original."""
    for marked in _MARKED.finditer(text):
        head, tail = text[: marked.start()], text[marked.end() :]
        cut = int(marked.group(1))
        kept = len(head) + len(tail)
        if len(tail) == kept // 4 and _kept(kept + cut, len(text)) == kept:
            return head, cut, tail
    return None

