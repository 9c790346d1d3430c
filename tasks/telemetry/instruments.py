"""The metrics the contract lists, made once per meter: the GenAI conventions' two histograms and Baton's own."""

from __future__ import annotations

from opentelemetry.metrics import Meter

# The conventions' advisory bucket boundaries: seconds for a call, tokens (powers of 4) for usage.
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]


class Instruments:
    def __init__(self, meter: Meter) -> None:
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration (each provider attempt, discarded ones included)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens billed per provider attempt (input includes cache reads and writes)",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.units = meter.create_counter(
            "baton.units", unit="{unit}", description="Units settled, by kind, agent and outcome"
        )
        self.discarded = meter.create_counter(
            "baton.attempts.discarded", unit="{attempt}", description="Provider attempts discarded, by failure class"
        )
        self.interruptions = meter.create_counter(
            "baton.interruptions", unit="{interruption}", description="Executions ended by a drain or a lost worker"
        )
        self.queue_wait = meter.create_histogram(
            "baton.queue.wait", unit="s", description="From a unit's enqueue to its first execution"
        )
