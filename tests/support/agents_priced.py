"""Agents with a price, for the budget tests (tests/integration/test_budgets.py).

Loaded by workers through `BATON_AGENTS=tests.support.agents_priced:AGENTS`. `priced` bills at Anthropic-like prices;
`plain` has no price (only token budgets hold it). Both answer with at most `MAX_TOKENS` tokens.
"""

from __future__ import annotations

from agent import Agent, Price
from tests.support.counting_tools import lookup, record_note

PRICE = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
MAX_TOKENS = 200

PRICED = Agent(name="priced", tools=(record_note, lookup), max_tokens=MAX_TOKENS, price=PRICE)
PLAIN = Agent(name="plain", tools=(record_note, lookup), max_tokens=MAX_TOKENS)

AGENTS = [PRICED, PLAIN]
