"""The scripted provider: deterministic answers, streamed through the same reducer as the real one.

Used by unit tests (an explicit list of replies) and by `baton demo` and workers with
`BATON_PROVIDER=scripted` (directives written in the user's message, or kept off it in cues,
see `directive_script`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent.errors import Cancelled, CueLoadError, ProviderError
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, IncompleteStream, StreamStalled
from agent.messages import TextBlock, ToolUseBlock
from agent.provider.base import Answer, AttemptFailed, ProviderRequest, TextSink
from agent.provider.reducer import Snapshot, accumulate

Fault = Literal["drop", "stall", "overloaded", "server_error", "rate_limited", "auth"]


@dataclass(frozen=True)
class ScriptedReply:
    """One answer, or one broken attempt when `fault` is set (`partial` text is streamed first)."""

    content: tuple[TextBlock | ToolUseBlock, ...] = ()
    stop_reason: str | None = None
    fault: Fault | None = None
    partial: str = ""
    delay: float = 0.0
    input_tokens: int = 10
    output_tokens: int = 5


def reply_text(text: str) -> ScriptedReply:
    return ScriptedReply(content=(TextBlock(text=text),))


def reply_tool(name: str, tool_input: dict[str, Any], *, call_id: str | None = None) -> ScriptedReply:
    digest = hashlib.sha1(f"{name}{json.dumps(tool_input, sort_keys=True)}".encode()).hexdigest()[:12]
    return ScriptedReply(content=(ToolUseBlock(id=call_id or f"toolu_{digest}", name=name, input=tool_input),))


def reply_fault(fault: Fault, partial: str = "") -> ScriptedReply:
    return ScriptedReply(fault=fault, partial=partial)


Script = Callable[[ProviderRequest, int], ScriptedReply]

_FAULT_ERRORS: dict[str, Callable[[], BaseException]] = {
    "drop": lambda: IncompleteStream("scripted: connection dropped mid-stream"),
    "stall": lambda: StreamStalled("scripted: no stream event within the idle timeout"),
    "overloaded": lambda: ProviderError(
        "scripted: overloaded_error", failure_class=FailureClass.PROVIDER_OVERLOADED, retryable=True
    ),
    "server_error": lambda: ProviderError(
        "scripted: 500 api_error", failure_class=FailureClass.PROVIDER_SERVER_ERROR, retryable=True
    ),
    "rate_limited": lambda: ProviderError(
        "scripted: 429 rate_limit_error", failure_class=FailureClass.PROVIDER_RATE_LIMITED, retryable=True
    ),
    "auth": lambda: ProviderError(
        "scripted: 401 authentication_error", failure_class=FailureClass.PROVIDER_AUTH, retryable=False
    ),
}


class ScriptedProvider:
    """Plays a script; `requests` records what it was sent (a counting double for unit tests)."""

    def __init__(self, script: Script | Sequence[ScriptedReply]) -> None:
        if callable(script):
            self._script: Script = script
        else:
            replies = list(script)
            self._script = lambda _request, index: replies[index] if index < len(replies) else reply_text("(end)")
        self.requests: list[ProviderRequest] = []
        self._lock = threading.Lock()

    def stream(
        self,
        request: ProviderRequest,
        *,
        cancel: CancelToken,
        on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer:
        cancel.raise_if_set()
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        reply = self._script(request, index)
        if reply.delay > 0 and cancel.wait(reply.delay):
            raise Cancelled(cancel.reason or "stop")
        snapshot = Snapshot()
        for event in _events(reply, index):
            accumulate(event, snapshot)
            delta = event.get("delta", {})
            if on_text is not None and delta.get("type") == "text_delta":
                on_text(delta["text"])
        if reply.fault is not None:
            raise AttemptFailed(_FAULT_ERRORS[reply.fault](), snapshot.usage, had_output=snapshot.had_output)
        return snapshot.to_answer()


def _events(reply: ScriptedReply, index: int) -> list[dict[str, Any]]:
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": f"msg_scripted_{index}", "usage": usage}}
    ]
    if reply.fault is not None:
        if reply.partial:
            events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            events.append(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": reply.partial}}
            )
        return events
    for i, block in enumerate(reply.content):
        if isinstance(block, TextBlock):
            events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            events.append(
                {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block.text}}
            )
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            events.append({"type": "content_block_start", "index": i, "content_block": start})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.input)}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    stop_reason = reply.stop_reason or (
        "tool_use" if any(isinstance(b, ToolUseBlock) for b in reply.content) else "end_turn"
    )
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


class Counter(Protocol):
    """Counts across processes (Redis in workers), so a scripted fault fires once per turn, not per worker."""

    def incr(self, key: str) -> int: ...


@dataclass
class MemoryCounter:
    counts: dict[str, int] = field(default_factory=dict)

    def incr(self, key: str) -> int:
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]


_TOOL = re.compile(r"tool:([A-Za-z_][\w-]*)(\{[^{}]*\})?")
_FAIL_AFTER_TOOLS = re.compile(r"fail-after-tools(?::(\d+))?")
_SLOW = re.compile(r"slow:(\d+(?:\.\d+)?)")
_STEPS = re.compile(r"steps:(\d+)")


def _prompt(request: ProviderRequest) -> tuple[str, int]:
    """The last user text in the request, and how many assistant answers follow it."""
    for i in range(len(request.messages) - 1, -1, -1):
        message = request.messages[i]
        if message["role"] != "user":
            continue
        texts = [b["text"] for b in message["content"] if b.get("type") == "text"]
        if texts:
            answered = sum(1 for m in request.messages[i + 1 :] if m["role"] == "assistant")
            return " ".join(texts), answered
    return "", 0


def _results(request: ProviderRequest) -> list[str]:
    out: list[str] = []
    for message in request.messages:
        for block in message["content"]:
            if block.get("type") == "tool_result":
                out.append(str(block.get("content", "")))
    return out


def _instructions(request: ProviderRequest) -> str:
    """The request's system prompt as text (what an agent was told), for a cue's `{instructions}`."""
    system = request.system
    if isinstance(system, list):
        return "".join(str(b.get("text", "")) for b in system)
    return system or "nothing"


def _offered(request: ProviderRequest) -> str:
    """The names of the tools the request offers, for a cue's `{tools}`."""
    return ", ".join(str(t.get("name")) for t in request.tools) or "no tools"


@dataclass(frozen=True)
class Cue:
    """What the scripted agent does when the user says a cue's text, so the text itself stays natural.

    `directives` are read as if they had been written in the user's message; `answer` is the final
    answer, `{results}` standing for the tool results joined with "; ", `{instructions}` for the request's system
    prompt and `{tools}` for the names of the tools it offers (so a demo can show which agent answered).
    """

    directives: str
    answer: str = "Done: {results}."


def load_cues(spec: str) -> dict[str, Cue]:
    """Load `module:attribute`, a mapping of user texts to cues (`BATON_SCRIPTED_CUES`); empty for ""."""
    if not spec.strip():
        return {}
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise CueLoadError(f"{spec!r} is not of the form module:attribute")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise CueLoadError(f"{spec!r} cannot be loaded: {err}") from err
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, Cue) for k, v in value.items()):
        raise CueLoadError(f"{spec!r} is not a mapping of texts to Cue")
    return {k.strip(): v for k, v in value.items()}


def prompt_key(prompt: str) -> str:
    """The key a prompt's fault counters live under (a caller resetting them needs it)."""
    return hashlib.sha1(prompt.encode()).hexdigest()[:16]


def directive_script(counter: Counter | None = None, cues: Mapping[str, Cue] | None = None) -> Script:
    """A deterministic agent driven by directives in the user's text, or in the cue for that text.

    `tool:NAME{json}` calls NAME, one directive per round, in order; `steps:N` writes N files with
    `write_file`; `drop` breaks the final answer's first attempt mid-stream; `fail-after-tools:N`
    fails the first N attempts after the tools ran (overloaded); `slow:S` takes S seconds per answer.
    Otherwise it answers with what the tools returned. When the user's whole text is a key of `cues`,
    that cue's directives apply instead and the text is never parsed, so a conversation meant to be
    read (`baton demo`) carries no directive.
    """
    counts = counter or MemoryCounter()
    cued = dict(cues or {})

    def script(request: ProviderRequest, _index: int) -> ScriptedReply:
        said, answered = _prompt(request)
        cue = cued.get(said.strip())
        prompt = cue.directives if cue is not None else said
        slow = _SLOW.search(prompt)
        delay = float(slow.group(1)) if slow else 0.0
        calls = [(m.group(1), json.loads(m.group(2)) if m.group(2) else {}) for m in _TOOL.finditer(prompt)]
        steps = _STEPS.search(prompt)
        if steps:
            calls += [
                ("write_file", {"path": f"step{i}.txt", "content": f"step {i}\n"}) for i in range(int(steps.group(1)))
            ]
        # Keyed by what was said, so two cues with the same directives keep their own fault counters.
        key = prompt_key(said)
        if answered < len(calls):
            name, tool_input = calls[answered]
            reply = reply_tool(name, tool_input, call_id=f"toolu_{key[:8]}_{answered}")
            return ScriptedReply(content=reply.content, delay=delay)
        fail = _FAIL_AFTER_TOOLS.search(prompt)
        if fail and calls and counts.incr(f"fail:{key}") <= int(fail.group(1) or 1):
            return ScriptedReply(fault="overloaded", delay=delay)
        if "drop" in prompt.split() and counts.incr(f"drop:{key}") == 1:
            return ScriptedReply(fault="drop", partial="Here is a partial answer that will be cu", delay=delay)
        results = _results(request)[-len(calls) :] if calls else []
        summary = "; ".join(results) if results else "no tools needed"
        answer = (cue.answer if cue is not None else "Done: {results}.").format(
            results=summary, instructions=_instructions(request), tools=_offered(request)
        )
        return ScriptedReply(content=(TextBlock(text=answer),), delay=delay)

    return script
