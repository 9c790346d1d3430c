"""How the suite is shared out among pytest-xdist workers (pyproject: `-n 3 --dist loadgroup`).

xdist hands out groups (the `xdist_group` mark) whole, one after the other in collection order, to whichever
worker is nearly out of work. Every test not in a named group is put in its file's group, so a file's tests run
one after the other on one worker, as in a serial run: a module-scoped RabbitMQ node or browser stack starts
once, and tests of one file never race each other. A named group keeps tests of different files that share
something machine-wide (the uid nobody's processes) off each other.

The order matters as much as the split: a five-minute group handed out last is five minutes of one worker
alone at the end. So the groups that go first are those with a test that declares a longer timeout than the
default (they say they are long: the chaos runs), then the integration groups (real processes: seconds a test),
then the rest (milliseconds a test, to fill the gaps at the end); larger groups first within each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest


def group_of(item: pytest.Item) -> str:
    """The item's group as xdist names it (its marks' names joined), its file when it has none."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else item.nodeid.split("::")[0]


def declared_timeout(item: pytest.Item) -> float:
    """The item's own `pytest.mark.timeout`, 0 when it keeps the default."""
    mark = item.get_closest_marker("timeout")
    if mark is None:
        return 0.0
    value = mark.args[0] if mark.args else mark.kwargs.get("timeout", 0)
    return float(value or 0)


def start_first(group: Sequence[pytest.Item]) -> tuple[float, bool, int]:
    """Sort key: the longest-declared groups first, then integration groups, then larger groups."""
    return (
        -max(declared_timeout(item) for item in group),
        not any(item.get_closest_marker("integration") for item in group),
        -len(group),
    )


def in_groups(items: Iterable[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """The items by group, each group in collection order; every item is marked with its group."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        name = group_of(item)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(name))
        groups.setdefault(name, []).append(item)
    return groups


def ordered(groups: dict[str, list[pytest.Item]]) -> list[pytest.Item]:
    """The items, group after group in the order xdist should hand them out (stable within equal keys)."""
    return [item for group in sorted(groups.values(), key=start_first) for item in group]
