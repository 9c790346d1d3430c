"""One exception tree for the agent core, and the control-flow signals that stand outside it."""

from __future__ import annotations

from typing import Literal


class BatonError(Exception):
    """Base of every error Baton raises on purpose.

    Each one declares `failure_class` (a `FailureClass` value; a class attribute, or set per instance), which is
    what `agent.loop.failures.classify` maps it to: an error Baton raises is never `unknown`, which stays for what
    nobody foresaw (tests/unit/test_failures.py walks every subclass to hold that).
    """

    failure_class: str


class ToolError(BatonError):
    """A tool refused or failed a call; the loop turns it into an `is_error` tool_result."""

    failure_class = "tool_error"


class ToolDefinitionError(BatonError):
    """A function cannot be a tool (missing hints, unsupported parameter types, bad effect)."""

    failure_class = "tool_error"


class ToolLoadError(BatonError):
    """`BATON_TOOLS` names something that is not a list of tools."""

    failure_class = "tool_error"  # the unit's tools cannot run; retryable once the worker's BATON_TOOLS is mended


class McpConfigError(ToolLoadError):
    """`BATON_MCP_SERVERS` names a file that is not a valid `mcpServers` document."""


class CueLoadError(BatonError):
    """`BATON_SCRIPTED_CUES` names something that is not a mapping of texts to scripted cues."""

    failure_class = "provider_bad_request"  # the (scripted) provider cannot be built: re-sending cannot help


class ProviderError(BatonError):
    """A provider request failed for good; carries its failure class and the usage it spent."""

    def __init__(self, message: str, *, failure_class: str, retryable: bool) -> None:
        super().__init__(message)
        self.failure_class = failure_class
        self.retryable = retryable


class LeaseLost(BatonError):
    """Another execution owns this chat or run now; a stale holder must not write."""

    failure_class = "infra_transient"  # a lost lease is a lost worker's: the execution that took it goes on


class LeaseLostUnsent(LeaseLost):
    """`LeaseLost` found in an attempt's preflight (the write that led it, tasks/store/preflight.py), before the
    attempt was sent: it cost nothing, and its reservation settles to nothing."""


CancelReason = Literal["stop", "drain"]


class Cancelled(Exception):
    """Raised inside the loop when a stop or a worker drain was requested. Not a failure."""

    def __init__(self, reason: CancelReason) -> None:
        super().__init__(reason)
        self.reason: CancelReason = reason


class AwaitingApproval(Exception):
    """The round has calls waiting for a person's decision; the unit parks until every one is decided."""

    def __init__(self, pending: list[str]) -> None:
        super().__init__(f"waiting for approval of {', '.join(pending)}")
        self.pending = pending
