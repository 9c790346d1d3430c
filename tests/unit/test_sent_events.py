"""When a send builds Flower's task-sent event: while a receiver hears it, and at each re-check while none does."""

from __future__ import annotations

from tasks.client.sent_events import RECHECK_SECONDS, SentEvents


def test_a_client_builds_the_event_until_it_learns_nobody_hears_it():
    assert SentEvents().wanted(0.0)


def test_an_event_nobody_heard_is_left_out_until_the_recheck():
    events = SentEvents()
    events.heard(0, 100.0)
    assert not events.wanted(100.0)
    assert not events.wanted(100.0 + RECHECK_SECONDS * 0.99)
    assert events.wanted(100.0 + RECHECK_SECONDS)  # one send builds it again, to learn whether a receiver came


def test_while_a_receiver_hears_it_every_send_builds_it():
    events = SentEvents()
    events.heard(0, 100.0)
    events.heard(1, 101.0)
    assert events.wanted(101.0) and events.wanted(101.0001)
    events.heard(0, 102.0)  # the receiver went away
    assert not events.wanted(102.5)
