"""The AI SDK's stream (`POST /api/chat`, UI message chunks) beside Baton's own SSE stream, on the same answers.

Each answer (~1,000 tokens from the fake Messages API, one text event per token, `PACE` apart: the answers
of bench/live_text.py) is read by both at once: the native stream (`GET /api/chats/{id}/stream`, opened
first) and the response of the `POST /api/chat` that sent the message, each by its own raw reader thread in
this process. Each provider text event is timed, as bench/live_text.py does, from the moment the fake server
wrote it to the moment the message carrying its last character arrived, on each stream: two latencies of the
same events, the same batching, the same machine load. Both streams come from one reader of the chat's
Redis stream (`tasks.store.tail`); the difference is the fold to UI chunks and the extra chunks it sends.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from collections.abc import Iterator

from bench._common import Row, Stack, fmt, judge, print_rows
from bench.live_text import event_latencies, long_answer, percentile
from tests.support.fake_anthropic import Script
from tests.support.web_server import ApiServer

TURNS = 3
GOAL_MS = 2.0  # the UI stream's p50 at most this much above the native stream's

Arrivals = list[tuple[float, str]]  # (arrival time, text) per SSE message carrying text


def ui_chunks(port: int, chat: str, text: str) -> Iterator[dict[str, object]]:
    """`POST /api/chat` as `DefaultChatTransport` sends it; its UI message chunks as they arrive."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {
        "id": chat,
        "messages": [{"id": f"{chat}-u", "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    }
    try:
        conn.request("POST", "/api/chat", body=json.dumps(body), headers={"content-type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"POST /api/chat: {response.status} {response.read()[:200]!r}")
        for raw in iter(response.readline, b""):
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return
            yield json.loads(line.removeprefix("data: "))
    finally:
        conn.close()


def read_native(server: ApiServer, chat: str, arrived: Arrivals, opened: threading.Event, ended: list[str]) -> None:
    with server.stream(f"/api/chats/{chat}/stream", timeout=60) as stream:
        opened.set()
        for message in stream.messages():
            if message.event == "text.delta":
                arrived.append((time.time(), message.data["text"]))
            if message.event in ("turn.completed", "turn.failed", "turn.stopped"):
                ended.append(str(message.event))
                return


def read_ui(port: int, chat: str, arrived: Arrivals, ended: list[str]) -> None:
    for chunk in ui_chunks(port, chat, "a long answer, please"):
        if chunk["type"] == "text-delta":
            arrived.append((time.time(), str(chunk["delta"])))
        elif chunk["type"] in ("reset-step", "error"):
            raise RuntimeError(f"{chat}: an unexpected {chunk['type']} chunk: {chunk}")
        elif chunk["type"] == "finish":
            ended.append(str(chunk.get("finishReason")))


def main(turns: int = TURNS) -> list[Row]:
    native: list[float] = []
    ui: list[float] = []
    paired: list[float] = []  # per provider event: its UI latency minus its native latency
    messages = {"native": 0, "ui": 0}
    with Stack("usechat", handler=Script([long_answer() for _ in range(turns)])) as stack:
        stack.worker("w1")
        server = ApiServer(stack.env, stack.tmp).start()
        try:
            assert stack.fake is not None
            for i in range(turns):
                chat = f"usechat-{i}"
                stack.fake.text_sent.clear()
                got_native: Arrivals = []
                got_ui: Arrivals = []
                ended: list[str] = []
                opened = threading.Event()
                threads = [
                    threading.Thread(target=read_native, args=(server, chat, got_native, opened, ended), daemon=True),
                    threading.Thread(target=read_ui, args=(server.port, chat, got_ui, ended), daemon=True),
                ]
                threads[0].start()
                if not opened.wait(30):
                    raise RuntimeError("the native stream did not open")
                threads[1].start()  # sends the message: both streams see the whole answer
                for t in threads:
                    t.join(120)
                if sorted(ended) != ["stop", "turn.completed"]:
                    raise RuntimeError(f"turn {i} ended {ended}")
                sent = list(stack.fake.text_sent)
                a, b = event_latencies(sent, got_native), event_latencies(sent, got_ui)
                native += a
                ui += b
                paired += [y - x for x, y in zip(a, b, strict=False)]
                messages["native"] += len(got_native)
                messages["ui"] += len(got_ui)
        finally:
            server.stop()
    n50, u50 = percentile(native, 50) * 1000, percentile(ui, 50) * 1000
    n99, u99 = percentile(native, 99) * 1000, percentile(ui, 99) * 1000
    diff = u50 - n50
    print(
        f"  {len(native)} provider text events over {turns} answers; SSE text messages native {messages['native']}, "
        f"useChat {messages['ui']}; p50 native {fmt(n50)} ms, useChat {fmt(u50)} ms (paired median difference "
        f"{fmt(statistics.median(paired) * 1000)} ms)",
        flush=True,
    )
    return [
        Row("provider event → native SSE text.delta, p50", n50, "ms", "—", "info"),
        Row("provider event → /api/chat text-delta chunk, p50 (same events, same run)", u50, "ms", "—", "info"),
        Row("/api/chat p50 - native p50", diff, "ms", f"≤ {GOAL_MS:.0f} ms", judge(diff, at_most=GOAL_MS)),
        Row("per event: /api/chat latency - native latency, median", statistics.median(paired) * 1000, "ms", "—",
            "info"),
        Row("provider event → native SSE text.delta, p99", n99, "ms", "—", "info"),
        Row("provider event → /api/chat text-delta chunk, p99", u99, "ms", "—", "info"),
    ]  # fmt: skip


if __name__ == "__main__":
    print_rows(main())
