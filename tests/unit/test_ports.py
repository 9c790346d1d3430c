"""The test harness's port allocator (tests/support/ports.py): xdist workers never share a port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import tests.support.ports as ports_module
from tests.support.ports import LOWEST, PortRange, ephemeral_start, worker_slice


def test_each_xdist_worker_has_its_own_slice_below_the_ephemeral_range():
    """Four workers' slices do not overlap and stay in [LOWEST, first ephemeral port); one process alone
    (no xdist) has the whole range."""
    slices = [set(worker_slice(LOWEST, 32768, f"gw{i}", 4)) for i in range(4)]
    for i, a in enumerate(slices):
        assert len(a) > 3000
        assert min(a) >= LOWEST and max(a) < 32768
        for b in slices[i + 1 :]:
            assert not a & b
    assert worker_slice(LOWEST, 32768, None, 1) == range(LOWEST, 32768)


def test_a_port_is_handed_out_once_until_the_slice_wraps_and_a_bound_one_is_skipped(monkeypatch):
    """A server's port stays its own while the server is down (a restart): the range moves on, never back."""
    in_use = {20003}
    monkeypatch.setattr(ports_module, "_bindable", lambda port: port not in in_use)
    ports = PortRange(range(20000, 20010))
    taken = [ports.take() for _ in range(9)]
    assert 20003 not in taken
    assert sorted(taken) == [p for p in range(20000, 20010) if p != 20003]
    assert ports.take() == taken[0]  # wrapped
    in_use.update(range(20000, 20010))
    with pytest.raises(RuntimeError, match="no free port in 20000-20009"):
        ports.take()


def test_a_port_in_use_is_not_bindable():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        assert not ports_module._bindable(held.getsockname()[1])


def test_the_ephemeral_range_is_read_from_proc_or_unknown(tmp_path: Path):
    (tmp_path / "range").write_text("32768\t60999\n")
    assert ephemeral_start(tmp_path / "range") == 32768
    assert ephemeral_start(tmp_path / "missing") is None
