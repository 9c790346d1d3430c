"""The agents of tests/integration/test_rate_limits.py: `default` with no limits of its own (only the fake's), and
`limited`, whose endpoint (another model) the fleet keeps under 20 requests a minute."""

from __future__ import annotations

from agent import Agent, RateLimits

LIMITED_RPM = 20

AGENTS = [
    Agent(name="default"),
    Agent(name="limited", model="claude-limited", rate_limits=RateLimits(requests_per_minute=LIMITED_RPM)),
]
