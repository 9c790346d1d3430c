"""OpenTelemetry end to end: real workers and `baton serve` export over OTLP/HTTP to a receiver in this process.

One Redis, one fake Messages API and one receiver for the module; the tests that need a worker of their own (a
drain, content capture, tracing off) start it on a queue of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agent.loop.failures import FailureClass
from tests.conftest import FAKE_KEY, Stack
from tests.support.fake_anthropic import FakeMessagesServer, Fault, Script, failing, text, tool_call
from tests.support.otlp_receiver import STATUS_ERROR, OtlpReceiver, Span
from tests.support.processes import REPO, RedisServer
from tests.support.web_server import ApiServer

pytestmark = pytest.mark.integration

STALL = failing(Fault(kind="stall", seconds=60, after_events=2), like=text("thinking about it for a long time"))
CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


@dataclass
class Traced:
    stack: Stack
    fake: FakeMessagesServer
    receiver: OtlpReceiver

    def executions(self, key: str, ident: str, count: int = 1, timeout: float = 30) -> list[Span]:
        """The `invoke_agent` spans of a unit (`baton.turn_id` or `baton.run_id`), once `count` arrived."""

        def found() -> list[Span]:
            spans = [s for s in self.receiver.spans("invoke_agent") if s.attributes.get(key) == ident]
            return sorted(spans, key=lambda s: s.attributes["baton.execution"])

        assert self.receiver.wait_for(lambda: len(found()) >= count, timeout), f"spans: {self.receiver.spans()}"
        return found()

    def children(self, parent: Span, name: str, count: int, timeout: float = 20) -> list[Span]:
        def found() -> list[Span]:
            spans = [s for s in self.receiver.spans(name) if s.parent_id == parent.span_id]
            return sorted(spans, key=lambda s: s.start)

        self.receiver.wait_for(lambda: len(found()) >= count, timeout)
        return found()


@pytest.fixture(scope="module")
def otel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    tmp = tmp_path_factory.mktemp("otel")
    redis_server = RedisServer(tmp / "redis").start()
    fake = FakeMessagesServer().start()
    receiver = OtlpReceiver().start()
    stack = Stack(redis_server, fake, tmp)
    stack.env.update(
        {
            "BATON_TOOLS": "tests.support.otel_probe:TOOLS",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: spans reach the receiver within the test's patience
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
        }
    )
    stack.worker("traced")
    yield Traced(stack, fake, receiver)
    stack.stop()
    receiver.stop()
    fake.stop()
    redis_server.stop()


def test_a_tool_round_is_one_execution_with_its_attempts_and_the_tool_that_ran(otel: Traced):
    """A turn with a tool round: one `invoke_agent default` span, two `chat claude-test` attempts and one
    `execute_tool lookup` under it, with the GenAI conventions' attributes; no content by default."""
    otel.fake.set_handler(Script([tool_call("lookup", {"key": "k1"}), text("found it")]))
    client = otel.stack.client()
    ref = client.send_message("otel-round", "look k1 up")
    assert client.wait(ref, timeout=60).status == "completed"
    [execution] = otel.executions("baton.turn_id", ref.turn_id)
    assert execution.name == "invoke_agent default" and execution.service == "baton-worker"
    assert execution.attributes == {
        **execution.attributes,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "default",
        "baton.chat_id": "otel-round",
        "baton.execution": 1,
        "baton.cause": "first",
        "baton.outcome": "completed",
        "gen_ai.request.model": "claude-test",
    }
    chats = otel.children(execution, "chat", 2)
    assert [s.name for s in chats] == ["chat claude-test", "chat claude-test"]
    assert [s.attributes["gen_ai.response.finish_reasons"] for s in chats] == [["tool_use"], ["end_turn"]]
    for attempt in chats:
        assert attempt.attributes["gen_ai.operation.name"] == "chat"
        assert attempt.attributes["gen_ai.provider.name"] == "anthropic"
        assert attempt.attributes["gen_ai.request.model"] == "claude-test"
        assert attempt.attributes["gen_ai.response.model"] == "claude-test"  # as the stream's message_start said
        assert attempt.attributes["baton.attempt"] == 1 and attempt.attributes["baton.discarded"] is False
        assert attempt.attributes["gen_ai.usage.input_tokens"] > 0
        assert attempt.attributes["gen_ai.usage.output_tokens"] > 0
        assert attempt.kind == 3  # CLIENT
    [tool] = otel.children(execution, "execute_tool", 1)
    assert tool.name == "execute_tool lookup"
    assert tool.attributes["gen_ai.tool.name"] == "lookup" and tool.attributes["baton.effect"] == "read"
    assert tool.attributes["gen_ai.tool.call.id"]
    # Only Baton's spans: the Anthropic SDK's own call spans would double the attempts.
    assert not [s for s in otel.receiver.spans() if s.trace_id == execution.trace_id and s.service != "baton-worker"]
    assert {s.name.split(" ")[0] for s in otel.receiver.spans() if s.trace_id == execution.trace_id} == {
        "invoke_agent", "chat", "execute_tool"}
    for span in [execution, *chats, tool]:
        assert not set(CONTENT_KEYS) & set(span.attributes), span.name


def test_a_dropped_stream_is_a_discarded_attempt_span_in_error(otel: Traced):
    """A stream dropped mid-answer: its attempt's span ends in error with `error.type` and `baton.discarded`;
    the replay is the next attempt's span, and the turn completes."""
    dropped = failing(Fault(kind="drop", after_events=3), like=text("half an ans"))
    otel.fake.set_handler(Script([dropped, text("the whole answer")]))
    client = otel.stack.client()
    ref = client.send_message("otel-drop", "answer me")
    assert client.wait(ref, timeout=60).reply == "the whole answer"
    [execution] = otel.executions("baton.turn_id", ref.turn_id)
    discarded, answered = otel.children(execution, "chat", 2)
    assert discarded.status == STATUS_ERROR and discarded.attributes["baton.discarded"] is True
    assert discarded.attributes["error.type"] in {str(c) for c in FailureClass} - {"cancelled", "unknown"}
    assert discarded.attributes["baton.attempt"] == 1
    assert answered.status != STATUS_ERROR and answered.attributes["baton.discarded"] is False
    assert answered.attributes["baton.attempt"] == 2


def test_a_traceparent_sent_to_baton_serve_reaches_the_unit(otel: Traced):
    """`baton serve` over real HTTP: the request's `traceparent` is continued by a server span, and the unit's
    execution is that span's child, in the caller's trace."""
    otel.fake.set_handler(Script([text("hello over http")]))
    server = ApiServer(dict(otel.stack.env), otel.stack.tmp_path).start()
    try:
        trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        request = urllib.request.Request(
            f"{server.url}/api/chats/otel-web/messages",
            data=json.dumps({"text": "hi"}).encode(),
            headers={"Content-Type": "application/json", "traceparent": f"00-{trace_id}-{span_id}-01"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            turn_id = json.loads(reply.read())["turn_id"]
        [execution] = otel.executions("baton.turn_id", turn_id)
        assert execution.trace_id == trace_id

        def chain() -> list[Span]:
            """The execution's ancestors in `baton serve`, up to the caller's span."""
            by_id = {s.span_id: s for s in otel.receiver.spans() if s.trace_id == trace_id}
            out, at = [], execution
            while at.parent_id in by_id:
                at = by_id[at.parent_id]
                out.append(at)
            return out

        assert otel.receiver.wait_for(lambda: chain() and chain()[-1].parent_id == span_id), chain()
        request_span = chain()[-1]
        assert request_span.service == "baton-serve" and request_span.kind == 2  # SERVER
        assert request_span.name == "POST /api/chats/{chat_id}/messages"
    finally:
        server.stop()


def test_content_is_recorded_only_when_asked(otel: Traced):
    """With OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true the attempts carry the messages and the tool
    its arguments and result (the first test proves them absent by default)."""
    queue = f"otel-content-{uuid.uuid4().hex[:6]}"
    worker = otel.stack.worker("content", BATON_QUEUE=queue, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    try:
        otel.fake.set_handler(Script([tool_call("lookup", {"key": "the-k2"}), text("the answer text")]))
        client = otel.stack.client(BATON_QUEUE=queue)
        ref = client.send_message("otel-content", "please look the-k2 up")
        assert client.wait(ref, timeout=60).status == "completed"
        [execution] = otel.executions("baton.turn_id", ref.turn_id)
        first, second = otel.children(execution, "chat", 2)
        assert "please look the-k2 up" in first.attributes["gen_ai.input.messages"]
        assert "the answer text" in second.attributes["gen_ai.output.messages"]
        [tool] = otel.children(execution, "execute_tool", 1)
        assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"key": "the-k2"}
        assert "gen_ai.tool.call.result" in tool.attributes
    finally:
        worker.stop()


def test_a_drained_run_is_two_linked_executions_and_replays_are_events(otel: Traced, tmp_path):
    """A run drained off one worker after its tool ran and finished by another: two `invoke_agent` spans, the
    second linked to the first with cause `drain`; the journal's steps it replays are `baton.replayed` events on it,
    and the tool's span is the one of the execution that ran it, never again."""
    queue = f"otel-drain-{uuid.uuid4().hex[:6]}"
    otel.fake.set_handler(Script([tool_call("record_note", {"note": "once"}), STALL, text("all done")]))
    before = otel.fake.request_count
    worker_a = otel.stack.worker("drain-a", BATON_QUEUE=queue)
    client = otel.stack.client(BATON_QUEUE=queue)
    ref = client.start_run("write a note", workspace=tmp_path)
    assert otel.fake.wait_for_requests(before + 2, timeout=30)  # A is mid-stream on the second step
    worker_b = otel.stack.worker("drain-b", BATON_QUEUE=queue)
    worker_a.terminate()
    worker_a.wait_exit(timeout=15)
    assert client.wait(ref, timeout=60).status == "completed"
    first, second = otel.executions("baton.run_id", ref.run_id, count=2)
    assert first.attributes["baton.cause"] == "first" and first.attributes["baton.outcome"] == "interrupted"
    assert second.attributes["baton.cause"] == "drain" and second.attributes["baton.outcome"] == "completed"
    assert second.attributes["baton.execution"] == 2
    assert [(t, s) for t, s, _ in second.links] == [(first.trace_id, first.span_id)]
    replayed = [attrs["baton.step"] for name, attrs in second.events if name == "baton.replayed"]
    assert replayed[0] == "model:0" and replayed[1].startswith("tool:")
    traces = {first.trace_id, second.trace_id}
    tools = [s for s in otel.receiver.spans("execute_tool") if s.trace_id in traces]
    assert [(s.name, s.parent_id) for s in tools] == [("execute_tool record_note", first.span_id)]
    cut = otel.children(first, "chat", 2)[-1]
    assert cut.attributes["baton.discarded"] is True and cut.attributes["error.type"] == "cancelled"
    assert [s.attributes["baton.discarded"] for s in otel.children(second, "chat", 1)] == [False]
    # The interruption is counted once, by the execution that resumed the run (a drained worker is on its way out).
    def counted() -> bool:
        points = otel.receiver.received.metrics.get("baton.interruptions", [])
        return any(p.get("baton.cause") == "drain" for p in points)

    assert otel.receiver.wait_for(counted, 60)
    worker_b.stop()


def test_a_threads_worker_traces_from_its_one_process(otel: Traced):
    """On the threads pool the SDK is set up in the worker's own process (no fork): a turn there is traced too."""
    queue = f"otel-threads-{uuid.uuid4().hex[:6]}"
    worker = otel.stack.worker("threads", pool="threads", BATON_QUEUE=queue)
    try:
        otel.fake.set_handler(Script([tool_call("lookup", {"key": "k3"}), text("threaded")]))
        client = otel.stack.client(BATON_QUEUE=queue)
        ref = client.send_message("otel-threads", "look k3 up")
        assert client.wait(ref, timeout=60).status == "completed"
        [execution] = otel.executions("baton.turn_id", ref.turn_id)
        assert len(otel.children(execution, "chat", 2)) == 2 and len(otel.children(execution, "execute_tool", 1)) == 1
    finally:
        worker.stop()


def test_nothing_of_the_sdk_is_set_up_without_otel_variables(otel: Traced):
    """A worker started without the OTEL_* variables (its pool child runs the probe tool) and `baton serve`'s app
    without them: no trace SDK or exporter imported, no global provider set, no export thread; the traced worker
    has all of them."""
    queue = f"otel-off-{uuid.uuid4().hex[:6]}"
    worker = otel.stack.worker("off", OTEL_EXPORTER_OTLP_ENDPOINT="", BATON_QUEUE=queue)
    try:
        off = _probe(otel, otel.stack.client(BATON_QUEUE=queue), "otel-off")
    finally:
        worker.stop()
    assert off == {"modules": [], "threads": [],
                   "providers": {"opentelemetry.trace": None, "opentelemetry.metrics._internal": None}}
    on = _probe(otel, otel.stack.client(), "otel-on")
    assert "opentelemetry.sdk.trace" in on["modules"] and on["threads"]
    assert on["providers"] == {
        "opentelemetry.trace": "TracerProvider", "opentelemetry.metrics._internal": "MeterProvider"}
    env = {k: v for k, v in otel.stack.env.items() if not k.startswith("OTEL_")}
    probe = ("import json, sys; from web.app import serve_app; serve_app(); from tests.support.otel_probe import "
             "otel_state; print(otel_state.fn())")
    done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == off


def _probe(otel: Traced, client, chat_id: str) -> dict:
    otel.fake.set_handler(Script([tool_call("otel_state", {}), text("probed")]))
    assert client.wait(client.send_message(chat_id, "probe"), timeout=60).status == "completed"
    result = otel.fake.requests[-1]["messages"][-1]["content"][0]
    return json.loads(_text(result["content"]))


def test_metrics_arrive_and_no_secret_is_in_anything_exported(otel: Traced):
    """The contract's metrics reach the receiver; and in every span, event, link and metric body exported by
    this module's workers and server, the provider key appears nowhere."""
    # Self-contained (xdist may run this file's tests on several workers, each with its own module stack): a turn
    # with a dropped stream makes every metric but the interruptions, which the drained-run test checks.
    otel.fake.set_handler(Script([failing(Fault(kind="drop", after_events=3), like=text("half")), text("whole")]))
    client = otel.stack.client()
    assert client.wait(client.send_message("otel-metrics", "count me"), timeout=60).reply == "whole"
    wanted = {"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "baton.units",
              "baton.attempts.discarded", "baton.queue.wait"}
    assert otel.receiver.wait_for(lambda: wanted <= set(otel.receiver.received.metrics), 60), sorted(
        otel.receiver.received.metrics)
    metrics = otel.receiver.received.metrics
    assert any(p.get("baton.outcome") == "completed" and p.get("gen_ai.agent.name") == "default"
               for p in metrics["baton.units"])
    assert {p.get("gen_ai.token.type") for p in metrics["gen_ai.client.token.usage"]} >= {"input", "output"}
    for body in otel.receiver.received.raw:
        assert FAKE_KEY.encode() not in body
    for span in otel.receiver.spans():
        assert not any(isinstance(v, str) and "SECRET" in v for v in span.attribute_values()), span.name


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
