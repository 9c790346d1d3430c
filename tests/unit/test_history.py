"""History repair: table tests for each pass and hypothesis properties of the whole pipeline."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.history.repair import (
    PASSES,
    RequestHistory,
    backfill_dangling_calls,
    collect_parallel_results,
    drop_orphaned_results,
    merge_same_role,
    problems,
    repair,
)
from agent.messages import (
    INTERRUPTED_RESULT,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    notice,
    to_api,
    user_text,
)


def _ask(*ids: str, text: str | None = None) -> Message:
    blocks = ([TextBlock(text=text)] if text else []) + [ToolUseBlock(id=i, name="t", input={"i": i}) for i in ids]
    return Message(role="assistant", content=tuple(blocks))


def _say(text: str) -> Message:
    return Message(role="assistant", content=(TextBlock(text=text),))


def _results(*ids: str) -> Message:
    return Message(role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=f"r-{i}") for i in ids))


def _result_map(messages: list[Message]) -> dict[str, list[ToolResultBlock]]:
    out: dict[str, list[ToolResultBlock]] = {}
    for message in messages:
        for block in message.tool_results:
            out.setdefault(block.tool_use_id, []).append(block)
    return out


VALID = [
    user_text("hi"),
    _ask("a", "b", text="looking"),
    notice("info", "tool ran"),
    _results("a", "b"),
    _say("done"),
    notice("resume", "Continued from the tool results already fetched."),
    user_text("again"),
    _say("ok"),
]


def test_valid_history_is_returned_unchanged():
    """Nothing to fix: every pass and the pipeline return the very same list object."""
    assert problems(VALID) == []
    for step in PASSES:
        assert step(VALID) is VALID
    assert repair(VALID) is VALID


def test_dangling_call_gets_the_exact_placeholder():
    """A call without a result is answered by a synthesized, non-error placeholder in a new user message."""
    history = [user_text("hi"), _ask("a")]
    fixed = repair(history)
    assert problems(history) and problems(fixed) == []
    assert [m.role for m in fixed] == ["user", "assistant", "user"]
    (block,) = fixed[2].content
    assert isinstance(block, ToolResultBlock)
    assert block.tool_use_id == "a"
    assert block.content == INTERRUPTED_RESULT == "[Interrupted before result was recorded]"
    assert block.is_error is False and block.synthesized is True


def test_dangling_call_before_next_prompt_puts_placeholder_first():
    """A failed turn's missing result is placed before the next prompt's text, in the same user message."""
    fixed = repair([user_text("hi"), _ask("a", "b"), _results("a"), _say("x"), user_text("next")])
    assert problems(fixed) == []
    fixed = repair([user_text("hi"), _ask("a"), user_text("next")])
    assert problems(fixed) == []
    assert [type(b).__name__ for b in fixed[2].content] == ["ToolResultBlock", "TextBlock"]
    assert fixed[2].content[0].synthesized and fixed[2].content[1].text == "next"


def test_partial_results_are_backfilled_next_to_the_real_ones():
    """Only the missing call gets a placeholder; the real result is kept as recorded."""
    fixed = repair([user_text("hi"), _ask("a", "b"), _results("a")])
    assert [(b.tool_use_id, b.synthesized) for b in fixed[2].tool_results] == [("a", False), ("b", True)]


def test_parallel_results_interleaved_with_notices_are_kept():
    """Results of parallel calls written by separate steps, with notices between them, are gathered, not dropped."""
    history = [
        user_text("hi"),
        _ask("a", "b", "c"),
        notice("info", "1"),
        _results("a"),
        notice("info", "2"),
        _results("c"),
        notice("info", "3"),
        _results("b"),
    ]
    fixed = repair(history)
    assert problems(fixed) == []
    assert {b.tool_use_id: b.content for b in fixed[3].tool_results} == {"a": "r-a", "c": "r-c", "b": "r-b"}
    assert not any(b.synthesized for b in fixed[3].tool_results)
    assert [m.role for m in fixed].count("notice") == 3
    assert collect_parallel_results(history) is not history


def test_results_split_over_adjacent_user_messages_are_kept():
    """Results of one round written as back-to-back user messages are gathered, not dropped as orphans."""
    history = [user_text("hi"), _ask("a", "b"), _results("a"), _results("b"), _say("done")]
    fixed = repair(history)
    assert problems(fixed) == []
    assert [(b.tool_use_id, b.content, b.synthesized) for b in fixed[2].tool_results] == [
        ("a", "r-a", False),
        ("b", "r-b", False),
    ]


def test_orphaned_results_are_dropped():
    """Results with no call in the assistant message right before them (unknown id, after a prompt, duplicate) go."""
    history = [user_text("hi"), _ask("a"), _results("a", "zz", "a"), _say("x"), user_text("q"), _results("a")]
    fixed = drop_orphaned_results(history)
    assert [b.tool_use_id for b in fixed[2].tool_results] == ["a"]
    assert len(fixed) == 5  # the all-orphan message is removed entirely
    assert problems(repair(history)) == []


def test_consecutive_user_messages_merge_with_results_first():
    """A failed turn's prompt and the next prompt merge into one user message; tool results lead it."""
    history = [user_text("one"), user_text("two")]
    merged = merge_same_role(history)
    assert len(merged) == 1 and merged[0].text == "onetwo"
    fixed = repair([user_text("hi"), _ask("a"), user_text("next"), _results("a")])
    assert problems(fixed) == []
    assert isinstance(fixed[2].content[0], ToolResultBlock)
    assert all(isinstance(b, TextBlock) for b in fixed[2].content[1:])


def test_backfill_and_merge_leave_notices_in_place():
    """Notices are not model messages: a notice between a call and its results neither blocks nor moves."""
    history = [user_text("hi"), _ask("a"), notice("stop", "Stopped by user."), user_text("next")]
    fixed = backfill_dangling_calls(history)
    assert fixed[2].role == "notice" and fixed[3].tool_results[0].synthesized
    assert problems(repair(history)) == []


# --- properties -------------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn, faults: bool = True) -> tuple[list[Message], dict[str, str]]:
    """Sensible histories: turns of prompts, tool rounds, results split by notices; with faults, losses too.

    Returns the history and, per call id, the real result that must survive repair.
    """
    ids = (f"toolu_{n}" for n in itertools.count())
    history: list[Message] = []
    kept: dict[str, str] = {}
    answered: list[str] = []
    for turn in range(draw(st.integers(1, 3))):
        history.append(user_text(f"prompt {turn}"))
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                history.append(notice("info", "n"))
            calls = [next(ids) for _ in range(draw(st.integers(1, 3)))]
            history.append(_ask(*calls, text=draw(st.sampled_from([None, "thinking"]))))
            present = [c for c in calls if not faults or draw(st.integers(0, 4))]
            order = draw(st.permutations(present))
            cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order))), max_size=2)))
            for part in (order[i:j] for i, j in itertools.pairwise([0, *cuts, len(order)])):
                if draw(st.booleans()):
                    history.append(notice("info", "step"))
                if part:
                    history.append(_results(*part))
            if faults and draw(st.integers(0, 5)) == 0:
                history.append(_results(draw(st.sampled_from(["ghost", *answered])) if answered else "ghost"))
            kept.update({c: f"r-{c}" for c in present})
            answered += present
            if len(present) < len(calls) and draw(st.booleans()):
                break  # the turn failed mid-round
        else:
            history.append(_say(f"answer {turn}"))
    return history, kept


@st.composite
def shuffled(draw: st.DrawFn) -> list[Message]:
    """Prompts, answers, calls, results (real, duplicate or unknown ids, some beside text) and notices in any order."""
    history, ids = [user_text("p")], ["ghost"]
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["prompt", "answer", "ask", "results", "mixed", "notice"]))
        if kind == "ask":
            calls = [f"t{len(ids) + i}" for i in range(draw(st.integers(1, 3)))]
            ids += calls
            history.append(_ask(*calls, text=draw(st.sampled_from([None, "x"]))))
        elif kind in ("results", "mixed"):
            message = _results(*draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3)))
            extra = (TextBlock(text="m"),) if kind == "mixed" else ()
            history.append(message.model_copy(update={"content": extra + message.content}))
        else:
            history.append({"prompt": user_text("u"), "answer": _say("s"), "notice": notice("info", "n")}[kind])
    return history


FAST = settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(histories())
def test_repair_yields_a_history_the_api_accepts(case):
    """Whatever a failure left behind, the repaired history has every tool_use answered and no API problem."""
    history, _ = case
    fixed = repair(history)
    assert problems(fixed) == []
    uses = [b.id for m in fixed for b in m.tool_uses]
    assert sorted(uses) == sorted(_result_map(fixed))


@FAST
@given(histories())
def test_repair_is_idempotent(case):
    """Repairing twice is repairing once, and the second run has nothing to fix (same object back)."""
    history, _ = case
    once = repair(history)
    assert repair(once) == once
    assert repair(once) is once


@FAST
@given(histories())
def test_repair_keeps_every_real_result_and_synthesizes_only_the_missing(case):
    """Each real result survives exactly once; placeholders appear only for calls whose result was lost."""
    history, kept = case
    results = _result_map(repair(history))
    for call_id, blocks in results.items():
        assert len(blocks) == 1
        (block,) = blocks
        if call_id in kept:
            assert (block.content, block.synthesized) == (kept[call_id], False)
        else:
            assert (block.content, block.synthesized, block.is_error) == (INTERRUPTED_RESULT, True, False)


@FAST
@given(histories(faults=False))
def test_repair_is_identity_on_histories_with_nothing_lost(case):
    """Without losses there is still work when results were split; once gathered, repair returns its input."""
    history, kept = case
    fixed = repair(history)
    assert {k: [b.content for b in v] for k, v in _result_map(fixed).items()} == {k: [v] for k, v in kept.items()}
    assert repair(fixed) is fixed


@FAST
@given(shuffled())
def test_repair_fixes_messages_in_any_order(history):
    """Even arbitrarily ordered messages come out acceptable to the API, and a second repair changes nothing."""
    once = repair(history)
    assert problems(once) == []
    assert repair(once) is once


@st.composite
def grown(draw: st.DrawFn) -> tuple[list[Message], list[list[Message]]]:
    """A prefix (sensible or shuffled), then what a loop appends between requests: mostly answered rounds
    (results in any order, ids fresh or reused), sometimes something else (a partial round, a prompt, a notice)."""
    prefix = draw(st.one_of(histories().map(lambda case: case[0]), shuffled()))
    steps: list[list[Message]] = []
    for n in range(draw(st.integers(1, 6))):
        calls = [f"g{n}-{i}" if draw(st.booleans()) else f"toolu_{i}" for i in range(draw(st.integers(1, 3)))]
        calls = list(dict.fromkeys(calls))
        kind = draw(st.sampled_from(["round", "round", "round", "partial", "prompt", "notice", "text_result"]))
        if kind == "round":
            ask = _ask(*calls, text=draw(st.sampled_from([None, "x"])))
            steps.append([ask, _results(*draw(st.permutations(calls)))])
        elif kind == "partial":
            steps.append([_ask(*calls), _results(*calls[:-1])] if len(calls) > 1 else [_ask(*calls)])
        elif kind == "text_result":
            message = _results(*calls)
            mixed = message.model_copy(update={"content": (TextBlock(text="m"), *message.content)})
            steps.append([_ask(*calls), mixed])
        else:
            steps.append([user_text("u") if kind == "prompt" else notice("info", "n")])
    return prefix, steps


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(grown())
def test_a_request_history_grown_round_by_round_equals_repairing_the_whole(case):
    """Whatever the prefix and whatever is appended, the incremental view is exactly `to_api(repair(...))`."""
    prefix, steps = case
    view = RequestHistory()
    messages = list(prefix)
    assert view.api(messages) == to_api(repair(messages))
    for step in steps:
        messages = [*messages, *step]
        assert view.api(messages) == to_api(repair(messages))
