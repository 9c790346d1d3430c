"""Tools: schemas from hints, descriptions from docstrings, safe execution, the cap seam and `BATON_TOOLS`."""

from __future__ import annotations

from typing import Literal, Optional  # Optional is what many users still write; it must keep working

import pytest

from agent.errors import ToolDefinitionError, ToolError, ToolLoadError
from agent.tools import RESULT_CAP_CHARS, Tool, ToolOutcome, by_name, cap_result, execute, load_tools, tool


@tool(effect="read")
def search(
    query: str,
    limit: int,
    ratio: float,
    exact: bool,
    tags: list[str],
    mode: Literal["fast", "deep"],
    note: Optional[str] = None,  # noqa: UP045
    page: int | None = None,
    depth: int = 2,
) -> str:
    """Search the index.

    Returns matching keys.
    """
    return f"{query}|{limit}|{ratio}|{exact}|{tags}|{mode}|{note}|{page}|{depth}"


def test_schema_from_hints():
    """Each supported hint maps to its JSON schema type; params without defaults are required, in order."""
    schema = search.input_schema
    assert schema["type"] == "object"
    assert schema["properties"] == {
        "query": {"type": "string"},
        "limit": {"type": "integer"},
        "ratio": {"type": "number"},
        "exact": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["fast", "deep"]},
        "note": {"type": "string"},
        "page": {"type": "integer"},
        "depth": {"type": "integer"},
    }
    assert schema["required"] == ["query", "limit", "ratio", "exact", "tags", "mode"]


def test_description_and_api_form():
    """The cleaned docstring is the description; the name is the function's; the API form has exactly three keys."""
    assert search.description == "Search the index.\n\nReturns matching keys."
    assert search.to_api() == {"name": "search", "description": search.description, "input_schema": search.input_schema}
    assert search.effect == "read" and search.idempotent is False


def test_no_required_key_when_everything_has_a_default():
    """A tool whose parameters all have defaults sends no `required` list."""

    @tool(name="ping_tool")
    def ping(times: int = 1) -> str:
        return "pong" * times

    assert ping.name == "ping_tool"
    assert ping.description == "ping"  # no docstring: the function name stands in
    assert "required" not in ping.input_schema


@pytest.mark.parametrize("effect", ["delete", "READ", ""])
def test_effect_must_be_read_or_write(effect):
    """An effect other than read or write is refused when the tool is defined."""
    with pytest.raises(ToolDefinitionError, match="effect"):
        tool(effect=effect)


def test_unsupported_definitions_are_refused():
    """A parameter without a hint, `*args`, or an unsupported type cannot be described to a model."""

    def no_hint(x) -> str:
        return x

    def star(*items: str) -> str:
        return ""

    def odd(x: complex) -> str:
        return ""

    for fn in (no_hint, star, odd):
        with pytest.raises(ToolDefinitionError):
            tool(fn)


@tool(effect="write")
def fails(kind: str) -> str:
    """Fail on purpose."""
    if kind == "tool":
        raise ToolError("path is outside the workspace")
    raise KeyError("boom")


def test_tool_error_becomes_an_error_outcome():
    """A ToolError's message reaches the model as an `is_error` result, not as an exception."""
    assert execute(fails, {"kind": "tool"}) == ToolOutcome("path is outside the workspace", is_error=True)


def test_arbitrary_exception_becomes_an_error_outcome():
    """A tool's own bug is reported with its type, and the turn goes on."""
    outcome = execute(fails, {"kind": "bug"})
    assert outcome.is_error and outcome.content == "KeyError: 'boom'"


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [({}, "kind"), ({"kind": "x", "extra": 1}, "extra"), ({"kind": 3}, "kind")],
)
def test_arguments_are_validated(arguments, fragment):
    """Missing, extra or mistyped arguments are refused before the tool runs."""
    calls: list[str] = []

    @tool
    def echo(kind: str) -> str:
        calls.append(kind)
        return kind

    outcome = execute(echo, arguments)
    assert outcome.is_error and "invalid arguments for echo" in outcome.content and fragment in outcome.content
    assert calls == []


def test_valid_arguments_fill_defaults_and_render_values():
    """Defaults are applied, and a non-string return value is rendered as JSON."""

    @tool
    def pair(a: int, b: int = 5) -> dict:
        return {"sum": a + b}

    assert execute(pair, {"a": 1}) == ToolOutcome('{"sum": 6}')
    assert execute(search, {"query": "q", "limit": 1, "ratio": 0.5, "exact": True, "tags": [], "mode": "fast"}) == (
        ToolOutcome("q|1|0.5|True|[]|fast|None|None|2")
    )


def test_idempotency_key_injected_only_when_declared():
    """A tool that declares `idempotency_key` receives it (hidden from its schema); others never see it."""
    seen: list[str | None] = []

    @tool(effect="write", idempotent=True)
    def charge(amount: int, idempotency_key: str | None = None) -> str:
        seen.append(idempotency_key)
        return "ok"

    @tool(effect="write")
    def plain(amount: int) -> str:
        return "ok"

    assert "idempotency_key" not in charge.input_schema["properties"]
    assert execute(charge, {"amount": 1}, idempotency_key="chat:toolu_1") == ToolOutcome("ok")
    assert seen == ["chat:toolu_1"]
    assert execute(plain, {"amount": 1}, idempotency_key="chat:toolu_2") == ToolOutcome("ok")
    smuggled = execute(charge, {"amount": 1, "idempotency_key": "model-made"}, idempotency_key="chat:toolu_3")
    assert smuggled.is_error and seen == ["chat:toolu_1"]


def test_a_callable_without_weak_references_still_gets_its_key_on_every_call():
    """Whether a tool takes the key is remembered per function; a callable that cannot be weakly referenced (an
    object with `__slots__`) is asked each time, and each call still gets its own key."""

    class Charge:
        __slots__ = ("seen",)

        def __init__(self) -> None:
            self.seen: list[str | None] = []

        def __call__(self, amount: int, idempotency_key: str | None = None) -> str:
            self.seen.append(idempotency_key)
            return "ok"

    fn = Charge()
    charge = Tool(name="charge", description="Charge.", input_schema={"type": "object"}, effect="write", fn=fn)
    for key in ("chat:toolu_1", "chat:toolu_2"):
        assert execute(charge, {"amount": 1}, idempotency_key=key) == ToolOutcome("ok")
    assert fn.seen == ["chat:toolu_1", "chat:toolu_2"]


def test_cap_result_keeps_head_and_tail_and_marks_the_cut():
    """Results over the cap keep their head (3/4 of what fits beside the marker) and tail (the rest), with a
    marker between them saying how much was cut, all within the cap; others pass untouched. The properties
    are in test_cap_result.py."""
    exact = "x" * RESULT_CAP_CHARS
    assert cap_result(exact) is exact
    capped = cap_result("y" * (RESULT_CAP_CHARS + 10))
    marker = "\n[… 35 characters cut …]\n"
    kept = RESULT_CAP_CHARS - len(marker)
    assert capped == "y" * (kept - kept // 4) + marker + "y" * (kept // 4)
    assert len(capped) == RESULT_CAP_CHARS
    assert cap_result("abcdefghij" * 4, limit=30) == "abcd\n[… 35 characters cut …]\nj"
    assert cap_result("abcdefghij", limit=4) == "abcd"  # no room for the marker: the head alone


def test_execute_caps_tool_output():
    """Every tool result, errors included, passes through the cap seam."""

    @tool
    def big() -> str:
        return "z" * (RESULT_CAP_CHARS * 2)

    outcome = execute(big, {})
    assert len(outcome.content) == RESULT_CAP_CHARS
    assert f"[… {RESULT_CAP_CHARS + 28} characters cut …]" in outcome.content


def test_load_tools_reads_lists_of_tools():
    """`module:attribute` entries, comma separated (blanks ignored), load every tool of each list."""
    loaded = load_tools(" tests.unit.test_tools:TOOLS , ,tests.unit.test_tools:MORE")
    assert [t.name for t in loaded] == ["search", "fails", "search"]
    assert all(isinstance(t, Tool) for t in loaded)
    assert load_tools("") == []


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nomodule:X", "cannot be loaded"),
        ("agent.tools:nothing", "cannot be loaded"),
        ("agent.tools", "module:attribute"),
        (":TOOLS", "module:attribute"),
        ("agent.tools:RESULT_CAP_CHARS", "not a @tool"),
        ("tests.unit.test_tools:NOT_TOOLS", "not a @tool"),
    ],
)
def test_load_tools_errors_name_the_entry(spec, fragment):
    """A bad `BATON_TOOLS` entry raises ToolLoadError naming the entry and what is wrong with it."""
    with pytest.raises(ToolLoadError, match=fragment) as info:
        load_tools(spec)
    assert spec.strip() in str(info.value)


def test_duplicate_names_are_refused():
    """Two tools with one name could not be told apart by the model."""
    assert set(by_name(TOOLS)) == {"search", "fails"}
    with pytest.raises(ToolDefinitionError, match="search"):
        by_name([*TOOLS, *MORE])


TOOLS = [search, fails]
MORE = [search]
NOT_TOOLS = [search, print]
