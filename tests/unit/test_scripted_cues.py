"""The scripted provider's cues: a natural line said by the user drives the directives kept off the text."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import CueLoadError
from agent.messages import TextBlock, ToolUseBlock
from agent.provider.base import ProviderRequest
from agent.provider.scripted import Cue, MemoryCounter, directive_script, load_cues

CUES = {"What's the weather in Paris?": Cue('tool:lookup{"key":"paris"} drop', "Found: {results}.")}


def _request(*messages: dict[str, Any]) -> ProviderRequest:
    return ProviderRequest(model="m", messages=list(messages))


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _after_tool(text: str, result: str) -> ProviderRequest:
    return _request(
        _user(text),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result}]},
    )


def test_a_cued_line_runs_the_cue_directives_and_answers_with_its_template():
    """The user's line carries no directive; its cue makes the agent call the tool, break the first answer's
    stream (`drop`), then answer with the cue's words around the tool result."""
    script = directive_script(MemoryCounter(), CUES)
    first = script(_request(_user("What's the weather in Paris?")), 0)
    assert first.content == (ToolUseBlock(id=first.content[0].id, name="lookup", input={"key": "paris"}),)
    assert script(_after_tool("What's the weather in Paris?", "18°C"), 1).fault == "drop"
    final = script(_after_tool("What's the weather in Paris?", "18°C"), 2)
    assert final.fault is None and final.content == (TextBlock(text="Found: 18°C."),)


def test_text_outside_the_cues_is_read_for_directives_as_before():
    """Tests and benchmarks that write directives in the text keep working when cues are loaded: a line that is
    not a cue is parsed, and the default answer is unchanged."""
    script = directive_script(MemoryCounter(), CUES)
    first = script(_request(_user('tool:lookup{"key":"a"}')), 0)
    assert first.content[0].name == "lookup" and first.content[0].input == {"key": "a"}
    final = script(_after_tool('tool:lookup{"key":"a"}', "v"), 1)
    assert final.content == (TextBlock(text="Done: v."),)
    assert script(_request(_user("hello")), 0).content == (TextBlock(text="Done: no tools needed."),)


def test_a_cued_line_is_never_parsed_for_directives():
    """Only the cue acts: directive-looking words in a cued line itself do nothing."""
    script = directive_script(MemoryCounter(), {'say tool:lookup{"key":"x"}': Cue("", "plain")})
    assert script(_request(_user('say tool:lookup{"key":"x"}')), 0).content == (TextBlock(text="plain"),)


def test_load_cues_reads_module_attribute_and_names_what_is_wrong():
    """`BATON_SCRIPTED_CUES` loads the demo's cues; a malformed or wrong spec raises CueLoadError saying why."""
    from tasks.demo.conversation import CUES as DEMO

    assert load_cues("tasks.demo.conversation:CUES") == DEMO
    assert load_cues("") == {}
    for spec, fragment in [
        ("tasks.demo.conversation", "module:attribute"),
        ("tasks.demo.nowhere:CUES", "cannot be loaded"),
        ("tasks.demo.conversation:WEATHER", "not a mapping"),
    ]:
        with pytest.raises(CueLoadError, match=fragment):
            load_cues(spec)
