"""A soak under retention: N one-tool-round chat turns through real workers with a short BATON_RETENTION, the
store's memory sampled throughout; after the last turn has been idle past the retention, memory should be back
within 10% of where it started (every chat deleted, indexes included), and the peak says what retention keeps the
store at under that load. Not a test: it prints figures.

    PYTHONPATH=. python -m bench.retention_soak [TURNS] [RETENTION_S]     (defaults 10000 and 20)
"""

from __future__ import annotations

import sys
import time

from bench._common import Stack, wait_for
from bench.store_bytes import one_round

IN_FLIGHT = 100


def used(r) -> int:
    return int(r.info("memory")["used_memory"])


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    retention = sys.argv[2] if len(sys.argv) > 2 else "20"
    env = {"BATON_RETENTION": retention, "BATON_LIVE_TEXT_RETENTION": "0", "BATON_LEASE_TTL": "4"}
    with Stack("soak", handler=one_round, **env) as stack:
        worker = stack.worker("s1", concurrency=4)
        client, r = stack.client(), stack.redis()
        start = used(r)
        peak, started, done = start, time.monotonic(), 0
        stamp = int(time.time())
        while done < turns:
            batch = [client.send_message(f"s{stamp}-{done + i}", "What does invoice 2041 say?")
                     for i in range(min(IN_FLIGHT, turns - done))]
            for ref in batch:
                result = client.wait(ref, timeout=120)
                if result.status != "completed" and not worker.alive:  # killed from outside (a shared machine)
                    print("  the worker died (signalled from outside); started again", flush=True)
                    worker.start(timeout=60)
                    result = client.wait(ref, timeout=120)
                if result.status != "completed":
                    raise RuntimeError(f"turn {ref} did not complete: {result.status}")
            done += len(batch)
            peak = max(peak, used(r))
            if done % 1000 == 0:
                rate = done / (time.monotonic() - started)
                print(f"  {done} turns ({rate:.0f}/s): used_memory {used(r) / 1e6:.2f} MB, chats kept "
                      f"{r.zcard('baton:chats:last')}", flush=True)
        elapsed = time.monotonic() - started
        wait_for(lambda: r.zcard("baton:chats:last") == 0, float(retention) + 60, interval=0.5,
                 what="retention to delete every chat")
        time.sleep(3.0)
        for key in r.scan_iter(match="test:*"):  # the counting tool's own call log, kept in the same Redis
            r.delete(key)
        end = used(r)
        print(f"{turns} turns in {elapsed:.0f} s ({turns / elapsed:.0f}/s), BATON_RETENTION={retention} s")
        print(f"  used_memory at start  {start / 1e6:8.2f} MB")
        print(f"  peak under load       {peak / 1e6:8.2f} MB  (what retention keeps the store at, at this rate)")
        print(f"  after expiry          {end / 1e6:8.2f} MB  ({(end - start) / start * 100:+.1f}% of the start;"
              f" goal within 10%)")
        left = sorted(k.decode() for k in r.scan_iter(count=1000))
        print(f"  keys left: {len(left)}: {', '.join(left)}")


if __name__ == "__main__":
    main()
