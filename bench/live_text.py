"""Live text: how long a delta takes from the provider's SSE event to the browser-facing SSE event, and what it costs.

A real worker streams answers of ~1,000 tokens from the fake Messages API (one text event per token, at
`PACE` seconds apart, about a model's speed; `provider="openai"`: from the fake Chat Completions server, one
content chunk per token) through `baton serve`; a raw SSE client reads the chat's stream.
Each provider text event is timed from the moment the fake server wrote it to the moment the SSE message
carrying its last character arrived (the same clock: both ends live in this process), batching included.
Redis memory is the events stream's `MEMORY USAGE` right after the turn settled and after its deltas were
trimmed (`BATON_LIVE_TEXT_RETENTION` is short here so the sweep runs within the benchmark).
"""

from __future__ import annotations

import statistics
import time

from bench._common import Row, Stack, fmt, judge, print_rows, wait_for
from tasks.store import keys
from tests.support.fake_anthropic import Reply, Script
from tests.support.web_server import ApiServer

TURNS = 3
TOKENS = 1000
PACE = 0.01  # seconds between provider events: 100 tokens/s
WORD = "tok "  # one token of text


def long_answer() -> Reply:
    return Reply([{"type": "text", "text": WORD * TOKENS}], parts=TOKENS, pace=PACE)


def event_latencies(sent: list[tuple[float, str]], arrived: list[tuple[float, str]]) -> list[float]:
    """Per provider event: arrival of the SSE delta holding its last character minus the time it was sent."""
    out: list[float] = []
    ends: list[tuple[int, float]] = []  # (cumulative chars through this SSE delta, its arrival time)
    total = 0
    for at, text in arrived:
        total += len(text)
        ends.append((total, at))
    upto, j = 0, 0
    for at, text in sent:
        upto += len(text)
        while j < len(ends) and ends[j][0] < upto:
            j += 1
        if j == len(ends):
            break  # the rest never arrived (a broken run); counted as missing, not as fast
        out.append(ends[j][1] - at)
    return out


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main(turns: int = TURNS, provider: str = "anthropic") -> list[Row]:
    latencies: list[float] = []
    before: list[int] = []
    after: list[int] = []
    deltas_per_turn: list[int] = []
    with Stack("live", handler=Script([long_answer() for _ in range(turns)]), provider=provider) as stack:
        stack.worker("w1", BATON_LIVE_TEXT_RETENTION="1")
        server = ApiServer(stack.env, stack.tmp).start()
        try:
            r = stack.redis()
            assert stack.fake is not None
            for i in range(turns):
                chat = f"live-{i}"
                stream = server.stream(f"/api/chats/{chat}/stream", timeout=60)
                stack.fake.text_sent.clear()
                status, body = server.post(f"/api/chats/{chat}/messages", {"text": "a long answer, please"})
                if status != 202:
                    raise RuntimeError(f"send failed: {status} {body}")
                arrived: list[tuple[float, str]] = []
                for message in stream.messages():
                    if message.event == "text.delta":
                        arrived.append((time.time(), message.data["text"]))
                    if message.event in ("turn.completed", "turn.failed", "turn.stopped"):
                        break
                stream.close()
                if message.event != "turn.completed":
                    raise RuntimeError(f"turn {i} ended {message.event}")
                latencies += event_latencies(list(stack.fake.text_sent), arrived)
                deltas_per_turn.append(len(arrived))
                key = keys.events(keys.owner("chat", chat))
                before.append(int(r.memory_usage(key) or 0))
                wait_for(lambda k=key: r.xlen(k) < 10, 30, interval=0.1, what="the sweep to trim the deltas")
                after.append(int(r.memory_usage(key) or 0))
        finally:
            server.stop()
    p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
    mem_before, mem_after = statistics.median(before) / 1024, statistics.median(after) / 1024
    print(
        f"  {len(latencies)} provider text events over {turns} answers; {fmt(statistics.median(deltas_per_turn))} "
        f"SSE deltas per answer; latency p50 {fmt(p50)} ms, p99 {fmt(p99)} ms, max {fmt(max(latencies) * 1000)} ms",
        flush=True,
    )
    return [
        Row("provider SSE event → browser-facing SSE delta, p50 (batching included)", p50, "ms", "≤ 60 ms",
            judge(p50, at_most=60)),
        Row("provider SSE event → browser-facing SSE delta, p99", p99, "ms", "—", "info"),
        Row(f"SSE deltas per {TOKENS}-token answer ({TOKENS} provider events, {PACE * 1000:.0f} ms apart)",
            statistics.median(deltas_per_turn), "deltas", "—", "info"),
        Row(f"Redis memory of the chat's stream after a {TOKENS}-token answer settled", mem_before, "KiB", "—",
            "info"),
        Row("… after its live text was trimmed (events kept)", mem_after, "KiB", "—", "info"),
    ]


if __name__ == "__main__":
    print_rows(main())
