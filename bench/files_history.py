"""A chat's files by reference, against the same files inline: the cost of reading its history at every turn,
and of building its request.

A chat of 50 turns (a question and an answer each) of which 20 carry a screenshot of 500 KB, in a real
redis-server. Two layouts of the same transcript:

- inline (before): each screenshot's base64 inside its user message's JSON, as a transcript holding the bytes
  would keep it; a turn reads the whole list (LRANGE) and parses it;
- by reference (after, Baton's): the user message holds `{"type": "image", "media_type", "sha256", "bytes",
  "name"}`, the bytes are one hash field per file beside the chat; a turn reads and parses the list
  (`load_transcript`, as every execution does), then builds its request (`to_api` with `StoredFiles`): from
  Redis on a worker's first turn of the chat (cold), from its cache after (warm).

The request's context estimate (`request_tokens`) is timed too: it reads each image's size from its header.

    PYTHONPATH=. python -m bench.files_history [TURNS] [SHOTS]
"""

from __future__ import annotations

import json
import math
import os
import statistics
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from agent.history.context import BYTES_PER_TOKEN, canonical, request_tokens
from agent.messages import Message, TextBlock, dump_message, to_api, user_text
from agent.messages.media import encode, file_block
from bench._common import Row, judge
from tasks.demo.embedded_redis import EmbeddedRedis
from tasks.store import files, keys
from tasks.store.reads import load_transcript

SHOT_BYTES = 500 * 1024
REPEAT = 15


def screenshot(seed: int) -> bytes:
    """A 1280x800 PNG header and 500 KB of noise (screenshots compress badly; the bytes are what matter)."""
    ihdr = struct.pack(">IIBBBBB", 1280, 800, 8, 2, 0, 0, 0)
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return head + seed.to_bytes(4, "big") + os.urandom(SHOT_BYTES - len(head) - 4)


def answer(turn: int) -> Message:
    return Message(role="assistant", content=(TextBlock(text=f"Answer {turn}: " + "an ordinary reply. " * 20),),
                   turn_id=f"t{turn}")


def write_chats(r: redis.Redis, turns: int, shots: int) -> tuple[str, str]:
    """The same chat twice: inline and by reference. Returns their owner ids."""
    inline, by_ref = keys.owner("chat", "inline"), keys.owner("chat", "by-ref")
    every = max(1, turns // shots)
    for turn in range(turns):
        question = f"Question {turn}: what does this show?"
        if turn % every == 0 and turn // every < shots:
            shot = screenshot(turn)
            block = file_block(shot, "image/png", f"shot-{turn}.png")
            files.store(r, by_ref, [(block.sha256, shot)])
            r.rpush(keys.transcript(by_ref), dump_message(user_text(question, f"t{turn}", (block,))))
            raw = {"role": "user", "turn_id": f"t{turn}", "content": [
                {"type": "text", "text": question},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encode(shot)}},
            ]}
            r.rpush(keys.transcript(inline), json.dumps(raw))
        else:
            for owner in (inline, by_ref):
                r.rpush(keys.transcript(owner), dump_message(user_text(question, f"t{turn}")))
        for owner in (inline, by_ref):
            r.rpush(keys.transcript(owner), dump_message(answer(turn)))
    return inline, by_ref


def timed_ms(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def inline_read(r: redis.Redis, owner: str) -> list[dict[str, Any]]:
    """The inline layout's read: the list, each entry's JSON parsed (its image blocks are already the wire's)."""
    return [json.loads(raw) for raw in r.lrange(keys.transcript(owner), 0, -1)]


def measure(turns: int, shots: int) -> dict[str, Any]:
    """Every figure, named; both layouts hold the same chat."""
    tmp = Path(tempfile.mkdtemp(prefix="baton-bench-files-"))
    server = EmbeddedRedis(tmp / "redis").start()
    try:
        r = redis.Redis.from_url(server.url)
        inline, by_ref = write_chats(r, turns, shots)
        history = load_transcript(r, by_ref)

        def cold() -> list[dict[str, Any]]:
            files._cache = files._Cache(files.CACHE_BYTES)  # a worker's first turn of this chat
            return to_api(history, files=files.StoredFiles(r, by_ref))

        warm_files = files.StoredFiles(r, by_ref)
        wire_ref = to_api(history, files=warm_files)
        wire_inline = [{"role": m["role"], "content": m["content"]} for m in inline_read(r, inline)]
        return {
            "bytes_inline": sum(len(x) for x in r.lrange(keys.transcript(inline), 0, -1)),
            "bytes_ref": sum(len(x) for x in r.lrange(keys.transcript(by_ref), 0, -1)),
            "read_inline": timed_ms(lambda: inline_read(r, inline)),
            "read_ref": timed_ms(lambda: load_transcript(r, by_ref)),
            "files_cold": timed_ms(cold),
            "files_warm": timed_ms(lambda: to_api(history, files=warm_files)),
            "same": json.dumps(wire_ref, sort_keys=True) == json.dumps(wire_inline, sort_keys=True),
            "estimate_ms": timed_ms(lambda: request_tokens([], None, wire_ref)),
            "tokens": request_tokens([], None, wire_ref),
            "as_text": math.ceil(len(canonical(wire_ref).encode()) / BYTES_PER_TOKEN),  # base64 read as text
        }
    finally:
        server.stop()


def side_by_side(f: dict[str, Any]) -> list[tuple[str, str, str]]:
    mib, read_ref = 1024 * 1024, f["read_ref"]
    return [
        ("transcript bytes read per turn", f"{f['bytes_inline'] / mib:.2f} MiB", f"{f['bytes_ref'] / 1024:.1f} KiB"),
        ("history read + parse per turn (median)", f"{f['read_inline']:.1f} ms", f"{read_ref:.2f} ms"),
        ("request build, worker's first turn (files from Redis)", f"{f['read_inline']:.1f} ms (read+parse)",
         f"{read_ref + f['files_cold']:.1f} ms (read+parse+{f['files_cold']:.1f} files)"),
        ("request build, later turns (worker's file cache)", f"{f['read_inline']:.1f} ms (read+parse)",
         f"{read_ref + f['files_warm']:.1f} ms (read+parse+{f['files_warm']:.2f} files)"),
        ("same request bytes either way", "", "yes" if f["same"] else "NO"),
        ("context estimate of the request", f"{f['as_text']} tokens (base64 as text)",
         f"{f['tokens']} tokens ({f['estimate_ms']:.2f} ms; images by header)"),
    ]


def main(turns: int = 50, shots: int = 20) -> list[Row]:
    """Prints the two layouts side by side; the rows are bench/run_all.py's."""
    f = measure(turns, shots)
    print(f"A chat of {turns} turns with {shots} screenshots of {SHOT_BYTES // 1024} KB, median of {REPEAT}:")
    print(f"  {'':<56} {'inline (before)':>28} {'by reference (after)':>36}")
    for name, before, after in side_by_side(f):
        print(f"  {name:<56} {before:>28} {after:>36}")
    return [
        Row("history bytes read per turn, files inline", f["bytes_inline"] / 1024, "KiB", "", "info"),
        Row("history bytes read per turn, files by reference", f["bytes_ref"] / 1024, "KiB", "", "info"),
        Row("history read + parse per turn, inline", f["read_inline"], "ms", "", "info"),
        Row("history read + parse per turn, by reference", f["read_ref"], "ms", "", "info"),
        Row("request's files from Redis (a worker's first turn)", f["files_cold"], "ms", "", "info"),
        Row("request's files from the worker's cache", f["files_warm"], "ms", "", "info"),
        Row("same request bytes either way", 1.0 if f["same"] else 0.0, "", "1", judge(float(f["same"]), at_least=1)),
    ]


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
