"""Tools: the `@tool` decorator, schemas from type hints, `BATON_TOOLS` loading, and running a call.

Every tool result, whatever produced it, passes through the cap (agent/tools/capping.py) before it re-enters a
prompt.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import types
import typing
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pydantic import ConfigDict, ValidationError, create_model

from agent.errors import ToolDefinitionError, ToolError, ToolLoadError
from agent.messages import ToolContent
from agent.tools.capping import RESULT_CAP_CHARS, cap_content, cap_result
from agent.tools.content import FileBytes, tool_content

Effect = Literal["read", "write"]
IDEMPOTENCY_PARAM = "idempotency_key"

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class Tool:
    """A callable the model may use. `idempotent` means re-running it under the same key is safe;
    `approval` that each call waits for a person to approve it (the unit parks, holding no worker)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: Effect
    fn: Callable[..., Any] = field(repr=False)
    idempotent: bool = False
    approval: bool = False
    server: str | None = None
    """The MCP server a tool comes from (None: a Python `@tool`); events and `baton tools` name it."""
    unavailable: str | None = None
    """Why this tool cannot run here (a unit's pinned definition offers it, this worker lacks its code): its calls
    are answered with this as an error, and nothing runs."""
    _validator: Any = field(default=None, repr=False, compare=False)

    def to_api(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)

    @property
    def source(self) -> str:
        """Where the tool comes from: `mcp:NAME` for an MCP server's, `python:module` for a `@tool`."""
        if self.server is not None:
            return f"mcp:{self.server}"
        return f"python:{getattr(self.fn, '__module__', None) or '?'}"


NO_LONGER_AVAILABLE = "Tool {name} is no longer available."


def no_longer_available(name: str) -> str:
    """The contract's words for a call to a tool the unit can no longer run."""
    return NO_LONGER_AVAILABLE.format(name=name)


def stand_in_for(name: str, description: str, input_schema: dict[str, Any]) -> Tool:
    """A tool offered as a unit's definition recorded it whose code this worker does not have: the model is offered
    the same bytes (so the request, and its prompt cache, do not change), and a call is answered
    `no_longer_available` without running anything."""

    def fn(**_: Any) -> str:
        raise ToolError(no_longer_available(name))

    return Tool(name, description, input_schema, "read", fn, unavailable=no_longer_available(name))


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result; `files`: the bytes of its images by SHA-256, for the chat's file store (the result itself
    holds only their references)."""

    content: ToolContent
    is_error: bool = False
    files: FileBytes = field(default_factory=dict)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    effect: Effect = "read",
    name: str | None = None,
    idempotent: bool = False,
    approval: bool = False,
) -> Any:
    """Make a function a tool: docstring → description, type hints → JSON schema."""
    if effect not in ("read", "write"):
        raise ToolDefinitionError(f"effect must be 'read' or 'write', not {effect!r}")
    if approval and effect != "write":
        raise ToolDefinitionError("approval=True is for write tools: a read has no effect to approve")

    def wrap(f: Callable[..., Any]) -> Tool:
        schema, validator = _schema_for(f)
        return Tool(
            name=name or f.__name__,
            description=inspect.cleandoc(f.__doc__ or f.__name__),
            input_schema=schema,
            effect=effect,
            fn=f,
            idempotent=idempotent,
            approval=approval,
            _validator=validator,
        )

    return wrap(fn) if fn is not None else wrap


def _json_schema(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is Literal:
        return {"enum": list(get_args(hint))}
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        args = get_args(hint)
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if len(options) == 1:
            return _json_schema(options[0])
        return {"anyOf": [_json_schema(a) for a in options]}
    raise ToolDefinitionError(f"unsupported parameter type {hint!r}")


def _schema_for(f: Callable[..., Any]) -> tuple[dict[str, Any], Any]:
    try:
        hints = typing.get_type_hints(f)
    except Exception as err:  # a hint that does not resolve is a definition error, whatever it raised
        raise ToolDefinitionError(f"{f.__name__}: type hints do not resolve: {err}") from err
    properties: dict[str, Any] = {}
    required: list[str] = []
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(f).parameters.items():
        if pname == IDEMPOTENCY_PARAM:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"{f.__name__}: *args/**kwargs cannot be described to a model")
        if pname not in hints:
            raise ToolDefinitionError(f"{f.__name__}: parameter {pname!r} has no type hint")
        properties[pname] = _json_schema(hints[pname])
        if param.default is param.empty:
            required.append(pname)
            fields[pname] = (hints[pname], ...)
        else:
            fields[pname] = (hints[pname], param.default)
    validator = create_model(f"{f.__name__}_input", __config__=ConfigDict(extra="forbid"), **fields)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema, validator


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def execute(t: Tool, arguments: dict[str, Any], *, idempotency_key: str | None = None) -> ToolOutcome:
    """Run a tool; bad arguments and tool exceptions become an `is_error` outcome, never a raise."""
    try:
        checked = t._validator.model_validate(arguments) if t._validator is not None else None
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in err.errors())
        return ToolOutcome(cap_result(f"invalid arguments for {t.name}: {problems}"), is_error=True)
    kwargs = dict(checked) if checked is not None else dict(arguments)
    if _takes_key(t.fn):
        kwargs[IDEMPOTENCY_PARAM] = idempotency_key
    try:
        content, files = tool_content(t.fn(**kwargs), _render)
        return ToolOutcome(cap_content(content, RESULT_CAP_CHARS, files), files=files)
    except ToolError as err:
        return ToolOutcome(cap_result(str(err)), is_error=True)
    except Exception as err:  # a tool's bug must reach the model as a result, not end the turn
        return ToolOutcome(cap_result(f"{type(err).__name__}: {err}"), is_error=True)


_takes: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def _takes_key(fn: Callable[..., Any]) -> bool:
    """Whether `fn` takes the call's idempotency key. Asked once a function: `inspect.signature` costs ~10 µs, on
    every tool call's path. (A callable that cannot be weakly referenced is asked every time.)"""
    try:
        return _takes[fn]
    except (KeyError, TypeError):
        takes = IDEMPOTENCY_PARAM in inspect.signature(fn).parameters
    with contextlib.suppress(TypeError):
        _takes[fn] = takes
    return takes


def load_tools(spec: str) -> list[Tool]:
    """Load `module:attribute` entries (each a list of tools), comma separated."""
    loaded: list[Tool] = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        module_name, _, attribute = entry.partition(":")
        if not module_name or not attribute:
            raise ToolLoadError(f"BATON_TOOLS entry {entry!r} is not of the form module:attribute")
        try:
            value = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as err:
            raise ToolLoadError(f"BATON_TOOLS entry {entry!r} cannot be loaded: {err}") from err
        items = list(value) if isinstance(value, Iterable) else [value]
        for item in items:
            if not isinstance(item, Tool):
                raise ToolLoadError(f"BATON_TOOLS entry {entry!r} holds {item!r}, which is not a @tool")
            loaded.append(item)
    return loaded


def by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    """Index tools by name; a duplicate name is a definition error (the model could not tell them apart)."""
    out: dict[str, Tool] = {}
    for t in tools:
        if t.name in out:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        out[t.name] = t
    return out
