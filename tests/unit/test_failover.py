"""A failover is told from the master's replication id changing; an unreadable reading proves nothing."""

from __future__ import annotations

from tasks.store.failover import failed_over


def test_a_changed_replication_id_is_a_failover_and_an_unknown_one_is_not():
    assert failed_over("aaa", "bbb") is True
    assert failed_over("aaa", "aaa") is False
    assert failed_over(None, "bbb") is False and failed_over("aaa", None) is False
