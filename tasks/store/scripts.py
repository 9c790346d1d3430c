"""Baton's Lua scripts as they are registered and sent: once per client, on a pipeline, several in one round trip.

A registered script's calls go straight on a connection of the client's pool, on a cluster its slot's master's
(tasks/store/direct.py).
"""

from __future__ import annotations

import weakref
from typing import Any

import redis
from redis.cluster import ClusterPipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from tasks.store.direct import Call, StraightScript, in_one_trip, raised

_registered: weakref.WeakKeyDictionary[Any, dict[str, Script]] = weakref.WeakKeyDictionary()


def registered(client: redis.Redis, source: str) -> Script:
    """`client.register_script(source)` made once per client and script (each registration hashes the script
    and builds an object; the pooled client lives as long as its process)."""
    scripts = _registered.get(client)
    if scripts is None:
        scripts = _registered.setdefault(client, {})
    script = scripts.get(source)
    if script is None:
        # Each call goes straight on a connection of the client's pool (on a cluster, its slot's master's): the
        # client's own way costs every call its routing and bookkeeping again (tasks/store/direct.py).
        script = scripts.setdefault(source, StraightScript(client, source))
    return script


def queue_script(pipe: Any, script: Script, keys: list[str], args: list[Any]) -> None:
    """Queue `script` on `pipe` as a plain command, EVALSHA: a pipeline given the script object asks SCRIPT EXISTS
    for it before it sends, a round trip of its own every time. Its reply is NOSCRIPT (`NoScriptError`, with
    `execute(raise_on_error=False)`) where the server lacks it (a restarted one): the caller runs it again through
    the client (`script(keys=..., args=...)` loads it), or `with_script`. A cluster's pipeline cannot load a script
    a node lacks (redis-py's cluster pipeline does not recover from NOSCRIPT), so there the script goes whole, as
    EVAL."""
    if isinstance(pipe, ClusterPipeline):
        pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)
    else:
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def with_script(client: Any, script: Script, keys: list[str], args: list[Any], *after: tuple[Any, ...]) -> list[Any]:
    """`script` and the commands `after` it in one pipeline, on one connection (WAIT counts that connection's
    writes), and their replies (an error reply raised). A server that lacks the script ran none of it: it is
    loaded there and the whole sent again."""

    def sent() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        queue_script(pipe, script, keys, args)
        for command in after:
            pipe.execute_command(*command)
        return list(pipe.execute(raise_on_error=False))

    replies = sent()
    if isinstance(replies[0], NoScriptError):
        client.script_load(script.script)
        replies = sent()
    return [raised(reply) for reply in replies]


def scripts_in_one_trip(client: Any, calls: list[tuple[Script, list[str], list[Any]]]) -> list[Any]:
    """Run several scripts, each on its own keys (slots), in one round trip; their replies in order (an error reply
    raised). EVALSHA each, as plain commands (`in_one_trip`)."""
    return [raised(reply) for reply in in_one_trip(client, [Call.script(client, *call) for call in calls])]
