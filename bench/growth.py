"""Cost as work grows: a chat turn's latency against the chat's length, a coding run's step cost against its steps.

Scripted provider (instant, no HTTP), so what grows is Baton's own work, not the provider's; one worker,
concurrency 2, runs and turns one at a time.

- Chat: fresh chats whose transcripts already hold 10, 100 or 1,000 messages (user and assistant text,
  written straight into Redis); one turn with one tool round each, timed from send to result.
- Run: runs of 10, 100 and 500 tool rounds (`steps:N`, one `write_file` per round); the cost of one round
  is the gap between consecutive `run.step` model events, taken over the first and the last 10 rounds, so a
  step that got dearer as the run grew shows as last ÷ first.
"""

from __future__ import annotations

import itertools
import time
import uuid

from agent.messages import Message, TextBlock, dump_message, user_text
from bench._common import Row, Stack, fmt, judge, median, print_rows
from tasks.store import keys

CHAT_LENGTHS = (10, 100, 1000)
RUN_STEPS = (10, 100, 500)
TURNS_PER_LENGTH = 7
TEXT = 'tool:peek{"key":"a"}'


def seed_transcript(r, chat_id: str, n: int) -> None:
    """`n` earlier messages, user and assistant in turn, as if the chat had run n/2 turns."""
    raw = []
    for i in range(n):
        if i % 2 == 0:
            raw.append(dump_message(user_text(f"earlier question {i}: " + "lorem ipsum " * 8, f"t-old-{i}")))
        else:
            msg = Message(role="assistant", content=(TextBlock(text=f"earlier answer {i}: " + "dolor sit " * 12),),
                          turn_id=f"t-old-{i - 1}", message_id=f"t-old-{i - 1}:m0")
            raw.append(dump_message(msg))
    r.rpush(keys.transcript(keys.owner("chat", chat_id)), *raw)


def round_gaps(events: list) -> list[float]:
    at = [e.at for e in events if e.type == "run.step" and (e.model_extra or {}).get("kind") == "model"]
    return [b - a for a, b in itertools.pairwise(at)]


def main() -> list[Row]:
    rows: list[Row] = []
    with Stack("growth", BATON_TOOLS="bench.tools:TOOLS", BATON_RUN_MAX_STEPS="2000") as stack:
        stack.worker("w1", concurrency=2)
        client = stack.client()
        r = stack.redis()
        stamp = uuid.uuid4().hex[:6]
        for i in range(3):  # warm-up
            client.wait(client.send_message(f"warm-{stamp}-{i}", TEXT), timeout=30)

        latency: dict[int, float] = {}
        for n in CHAT_LENGTHS:
            samples = []
            for i in range(TURNS_PER_LENGTH):
                chat = f"g{n}-{stamp}-{i}"
                seed_transcript(r, chat, n)
                started = time.perf_counter()
                result = client.wait(client.send_message(chat, TEXT), timeout=60)
                samples.append(time.perf_counter() - started)
                if result.status != "completed":
                    raise RuntimeError(f"turn on a {n}-message chat ended {result.status}: {result.failure}")
            latency[n] = median(samples) * 1000
            print(f"  turn after {n} earlier messages: p50 {fmt(latency[n])} ms", flush=True)

        per_round: dict[int, tuple[float, float, float]] = {}
        for steps in RUN_STEPS:
            workspace = stack.tmp / f"ws-{steps}"
            workspace.mkdir()
            started = time.perf_counter()
            ref = client.start_run(f"steps:{steps}", workspace)
            status = client.wait(ref, timeout=600)
            seconds = time.perf_counter() - started
            if status.status != "completed":
                raise RuntimeError(f"a {steps}-step run ended {status.status}: {status.failure}")
            gaps = round_gaps(client.events(ref.run_id))
            first, last = median(gaps[:10]) * 1000, median(gaps[-10:]) * 1000
            per_round[steps] = (seconds * 1000 / steps, first, last)
            print(f"  run of {steps} rounds: {fmt(seconds)} s, {fmt(seconds * 1000 / steps)} ms/round; "
                  f"a round p50 over the first 10 {fmt(first)} ms, over the last 10 {fmt(last)} ms", flush=True)

    for n in CHAT_LENGTHS:
        rows.append(Row(f"turn latency with {n} earlier messages (p50)", latency[n], "ms", "—", "info"))
    growth = latency[CHAT_LENGTHS[-1]] / latency[CHAT_LENGTHS[0]]
    rows.append(Row(f"turn latency at {CHAT_LENGTHS[-1]} ÷ at {CHAT_LENGTHS[0]} messages", growth, "x", "—", "info"))
    for steps in RUN_STEPS:
        mean, first, last = per_round[steps]
        rows.append(Row(f"run of {steps} rounds: ms per round (whole run)", mean, "ms", "—",
                        f"info (first 10 {fmt(first)} ms, last 10 {fmt(last)} ms)"))
    ratio = per_round[RUN_STEPS[-1]][2] / per_round[RUN_STEPS[0]][2]
    rows.append(Row(f"a round's cost late in a {RUN_STEPS[-1]}-round run ÷ in a {RUN_STEPS[0]}-round run", ratio, "x",
                    "—", judge(None) if ratio is None else "info"))
    return rows


if __name__ == "__main__":
    print_rows(main())
