"""How the suite is shared out among xdist workers (tests/support/xdist_groups.py)."""

from __future__ import annotations

import pytest

from tests.support.xdist_groups import in_groups, ordered


class FakeItem:
    """What the grouping reads of a pytest.Item: its node id and marks."""

    def __init__(self, nodeid: str, *marks: pytest.MarkDecorator) -> None:
        self.nodeid = nodeid
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name: str):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name: str):
        return next(self.iter_markers(name), None)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.marks.append(marker.mark)

    def __repr__(self) -> str:
        return self.nodeid


INTEGRATION = pytest.mark.integration


def test_a_files_tests_share_its_group_and_a_named_group_spans_files():
    a1, a2 = FakeItem("tests/unit/test_a.py::t1"), FakeItem("tests/unit/test_a.py::t2[x]")
    s1 = FakeItem("tests/integration/test_s.py::t", INTEGRATION, pytest.mark.xdist_group("uid-nobody"))
    s2 = FakeItem("tests/integration/test_r.py::t", INTEGRATION, pytest.mark.xdist_group(name="uid-nobody"))
    groups = in_groups([a1, s1, a2, s2])
    assert groups == {"tests/unit/test_a.py": [a1, a2], "uid-nobody": [s1, s2]}
    # xdist reads the mark to suffix the node id: every item carries exactly one
    assert [m.args for m in a2.iter_markers("xdist_group")] == [("tests/unit/test_a.py",)]
    assert len(list(s1.iter_markers("xdist_group"))) == 1


def test_long_declared_groups_go_out_first_then_integration_then_larger_groups():
    unit_big = [FakeItem(f"tests/unit/test_big.py::t{i}") for i in range(5)]
    unit_small = [FakeItem("tests/unit/test_small.py::t")]
    integ_small = [FakeItem("tests/integration/test_i.py::t", INTEGRATION)]
    integ_big = [FakeItem(f"tests/integration/test_j.py::t{i}", INTEGRATION) for i in range(2)]
    chaos = [FakeItem("tests/integration/test_chaos.py::t", INTEGRATION, pytest.mark.timeout(300))]
    items = [*unit_small, *unit_big, *integ_small, *integ_big, *chaos]
    assert ordered(in_groups(items)) == [*chaos, *integ_big, *integ_small, *unit_big, *unit_small]


def test_the_groups_reach_xdist(request: pytest.FixtureRequest) -> None:
    """On an xdist worker of a `--dist loadgroup` run, a test's node id carries its group (`@FILE`), which is all the
    controller groups by. pytest 9.2 keeps node ids where pytest-xdist 3.8 does not write them: every group was then
    silently ignored, a file's tests spread over all workers and each worker started its own module stacks."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not on an xdist worker of a loadgroup run (-n 0)")
    assert request.node.nodeid.endswith("@tests/unit/test_xdist_groups.py")
