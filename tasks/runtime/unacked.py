"""kombu's restore of unacknowledged messages, run by the sweeper on pools whose consumer never runs it.

kombu's Redis transport keeps a delivered message in its `unacked` hash until it is acknowledged, and puts one
older than the visibility timeout back in its queue (`QoS.restore_visible`): that is how a message held by a
consumer that died comes back. A prefork worker runs the restore on its event loop's timer. A gevent, eventlet,
threads or solo worker consumes through `drain_events`, which runs it only after a poll that saw nothing at all;
its one-second BRPOP always answers first, so such a worker never restored anything (measured: no `unacked_mutex`
in a whole chaos run's AOF, and a drained turn's message left unacked for good). Baton's lost-message sweep finds
such a message in the unacked hash and, rightly, publishes no copy: restoring it is kombu's part, done here.

The restore is kombu's own (its mutex, visibility timeout and limit from the transport options), on a
connection of the sweeper's; a copy restored while its unit runs is turned away by the lease, as any copy is.
"""

from __future__ import annotations

import contextlib
from typing import Any

from celery import Celery

from config.celeryconfig import UNACKED_RESTORE_SECONDS

INTERVAL = UNACKED_RESTORE_SECONDS  # as often as a prefork worker's timer restores


class UnackedRestorer:
    """One broker connection, kept across sweeps (opened again after a failure)."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self._connection: Any = None

    def restore(self) -> None:
        """Put the unacknowledged messages past the visibility timeout back in their queues (kombu's limit a call)."""
        try:
            if self._connection is None:
                self._connection = self._app.connection_for_write()
            channel = self._connection.default_channel
            channel.qos.restore_visible(num=channel.unacked_restore_limit, interval=1)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            with contextlib.suppress(Exception):  # closing a connection that failed: nothing more to do with it
                connection.release()
