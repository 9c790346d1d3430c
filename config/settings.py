"""One settings object, read from the environment; a bad value fails at start naming its variable."""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL = "claude-sonnet-4-5"


class SettingsError(Exception):
    """A setting is missing or malformed; the message names the environment variable."""


class Settings(BaseSettings):
    """Every knob Baton reads. Names are the contract's `BATON_*` variables."""

    model_config = SettingsConfigDict(env_prefix="BATON_", extra="ignore", frozen=True)

    redis_url: str = Field("redis://localhost:6379/0", pattern=r"^(redis|rediss|unix)://")
    broker_url: str | None = Field(None, pattern=r"^(redis|rediss|unix|amqp|amqps)://")
    # Redis Sentinel for the store (and the broker, unless BATON_BROKER_URL names another): `host:port,...`
    # and the monitored master's name. BATON_REDIS_URL then gives only the password and the database number.
    redis_sentinels: str = Field("", pattern=r"^(\s*[^\s,:]+:\d{1,5}\s*(,\s*[^\s,:]+:\d{1,5}\s*)*)?$")
    redis_master: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    # A Redis Cluster for the store: its startup nodes, `host:port,...` (BATON_REDIS_URL then gives only the password
    # and TLS). The broker (BATON_BROKER_URL) and Celery's result backend are then never the cluster.
    redis_cluster: str = Field("", pattern=r"^(\s*[^\s,:]+:\d{1,5}\s*(,\s*[^\s,:]+:\d{1,5}\s*)*)?$")
    # Behind Sentinel, a write tool's write-ahead entry waits for this many replicas at most (fewer when the
    # master has fewer online: tasks/store/replicas.py). 0 waits for none, and every write is stated unreplicated.
    redis_min_replicas: int = Field(1, ge=0, le=100)
    provider: Literal["anthropic", "openai", "scripted"] = "anthropic"
    model: str = Field(DEFAULT_MODEL, min_length=1)
    tools: str = ""
    # MCP servers (contract: "MCP tools"): the path of an `mcpServers` JSON file, which of their calls wait for a
    # person, and how long one call may take before its server counts as hung (and is started again).
    mcp_servers: str = ""
    mcp_approval: Literal["none", "destructive", "writes"] = "none"
    mcp_timeout: float = Field(60.0, gt=0, le=3600)
    # Agents (contract: "Agents"): `module:attribute` naming a list of `agent.Agent`; unset, one `default` agent of
    # the settings above. A unit whose agent no worker it meets serves waits this long, then fails `agent_unknown`;
    # an agent stays listed this long after the last worker serving it was seen.
    agents: str = Field("", pattern=r"^([A-Za-z_][\w.]*:[A-Za-z_]\w*)?$")
    agent_wait: float = Field(600.0, ge=0, le=7 * 24 * 3600)
    stream_idle_timeout: float = Field(20.0, gt=0, le=3600)
    # Rate limits (contract: "Spend"): how long a unit waits in its worker for its endpoint's limit before it goes
    # back to the queue with the rest of the wait.
    rate_wait: float = Field(5.0, ge=0, le=3600)
    retry_budget: int = Field(4, ge=1, le=20)
    round_ttl: int = Field(600, ge=1)
    round_max_bytes: int = Field(98304, ge=1024)
    max_interruptions: int = Field(3, ge=0, le=100)
    max_rounds: int = Field(12, ge=1, le=200)
    # Long runs (contract: "prompt caching and the context budget"). Unset context_tokens: the model's window.
    prompt_cache: Literal["on", "off"] = "on"
    context_tokens: int | None = Field(None, ge=1000, le=10_000_000)
    sandbox: Literal["bwrap", "none"] = "bwrap"
    sandbox_network: Literal["off", "on"] = "off"
    # Host uid a root worker becomes before bwrap, so the sandbox's process limit binds (the kernel never
    # applies RLIMIT_NPROC to uid 0). The workspace must then be writable by that uid.
    sandbox_uid: int | None = Field(None, ge=1, le=2**32 - 2)

    # Beyond the contract: operational knobs with safe defaults.
    queue: str = Field("baton", pattern=r"^[A-Za-z0-9_.:-]{1,100}$")
    lease_ttl: float = Field(15.0, ge=1, le=600)
    run_max_steps: int = Field(50, ge=1, le=10_000)
    run_wall_clock: float = Field(4 * 3600.0, gt=0)
    backoff_scale: float = Field(1.0, ge=0, le=10)
    # Off: each worker meets its provider's limits on its own (no shared waits, no `RateLimits`): the baseline the
    # bench compares sharing against, and a way out should the store's count ever be in the way.
    rate_sharing: Literal["on", "off"] = "on"
    stop_grace: float = Field(1.0, ge=0, le=60)
    drain_grace: float = Field(2.0, ge=0, le=60)
    # How long a tool call waits for a person's approval before it is denied ("approval expired").
    approval_ttl: float = Field(86400.0, gt=0, le=365 * 24 * 3600)
    # How long a settled unit's live text (its text.delta entries) stays readable before it is deleted.
    live_text_retention: float = Field(120.0, ge=0, le=7 * 24 * 3600)
    # Seconds an idle chat or run is kept after its last activity; 0 keeps everything (tasks/runtime/retention.py).
    retention: float = Field(0.0, ge=0)
    log_json: bool = False
    max_text_chars: int = Field(100_000, ge=1)
    # The most bytes a file a message carries may have; the provider's own limit (5 MiB an image, 20 MiB a PDF)
    # stays the ceiling (agent/messages/media.py `limit`).
    max_file_bytes: int | None = Field(None, ge=1)
    # The scripted provider's cues (`module:attribute`): texts a person reads, mapped to directives.
    scripted_cues: str = ""

    # The HTTP API (`baton serve`, web/). The token is a secret: SecretStr keeps it out of reprs and logs.
    api_token: SecretStr | None = None
    api_ping_interval: float = Field(15.0, gt=0, le=15)  # the contract: a comment at least every 15 s
    api_redis_connections: int = Field(2000, ge=2, le=100_000)  # one per open stream, plus a few

    @field_validator("api_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        # `BATON_API_TOKEN=` (compose files pass empty values) means no token, not a token of "".
        return None if value == "" else value

    @model_validator(mode="after")
    def _broker_defaults_to_store(self) -> Settings:
        if self.broker_url is None:
            object.__setattr__(self, "broker_url", self.redis_url)
        return self

    @model_validator(mode="after")
    def _sentinels_need_a_master(self) -> Settings:
        if bool(self.redis_sentinels.strip()) != bool(self.redis_master):
            # Reported under BATON_REDIS_MASTER: the two come together.
            raise ValueError("BATON_REDIS_SENTINELS and BATON_REDIS_MASTER must be set together")
        return self

    @model_validator(mode="before")
    @classmethod
    def _cluster_needs_a_broker(cls, data: object) -> object:
        # Checked before the broker defaults to the store: a cluster's store is no Celery broker (kombu's Redis
        # transport speaks to one node), so the broker must be named. Reported under BATON_BROKER_URL.
        if isinstance(data, dict) and str(data.get("redis_cluster") or "").strip():
            # Named, and not one of the cluster's nodes. It may equal BATON_REDIS_URL: on a cluster that URL's host
            # and port are ignored (it gives the password and TLS), so it can name a plain Redis beside it.
            broker = data.get("broker_url")
            if not broker or broker_is_a_cluster_node(str(broker), str(data["redis_cluster"])):
                raise ValueError(
                    "BATON_REDIS_CLUSTER needs BATON_BROKER_URL: a RabbitMQ, or a Redis that is not the cluster"
                )
            if str(data.get("redis_sentinels") or "").strip():
                raise ValueError("BATON_REDIS_CLUSTER and BATON_REDIS_SENTINELS are two topologies: set one")
        return data

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """The Sentinel addresses, in order; empty when the store is a plain Redis."""
        return _addresses(self.redis_sentinels)

    @property
    def cluster(self) -> list[tuple[str, int]]:
        """The Redis Cluster's startup nodes, in order; empty when the store is not a cluster."""
        return _addresses(self.redis_cluster)

    @property
    def broker(self) -> str:
        """The Celery broker URL: through the Sentinels too when the broker is the store."""
        url = self.broker_url or self.redis_url
        if self.sentinels and url == self.redis_url:
            return sentinel_url(self)
        return url

    @property
    def result_backend(self) -> str | None:
        """Celery's result backend: the store, through the Sentinels when there are some. Beside a cluster, the
        broker when it is a Redis, else none (nothing of Baton's reads Celery's results: the records say it all)."""
        if self.cluster:
            return self.broker if self.broker.startswith(("redis", "unix")) else None
        return sentinel_url(self) if self.sentinels else self.redis_url


def broker_is_a_cluster_node(broker_url: str, cluster: str) -> bool:
    """Whether `broker_url` is a Redis at one of the startup nodes of `cluster` (BATON_REDIS_CLUSTER's form).

    Compared as addresses, not strings: the port defaults to 6379 as redis-py's and kombu's do, a host's case and
    brackets do not count, and every loopback name (`localhost`, 127.0.0.0/8, `::1`) is one host, since a node
    bound on all interfaces answers on each of them. A name is not resolved (settings never wait on DNS), so a
    broker named `redis-1` beside a node given as its IP, or a node that is not among the startup nodes, is not
    caught here; kombu would then speak to one node of the cluster.
    """
    parts = urlsplit(broker_url)
    if parts.scheme not in ("redis", "rediss"):  # RabbitMQ, or a Unix socket: never a cluster node's address
        return False
    try:
        port = parts.port or 6379
        nodes = _addresses(cluster)
    except ValueError:  # a malformed port: the fields' own checks name it
        return False
    host = _host_key(parts.hostname or "localhost")  # kombu and redis-py read an empty host as localhost
    return any(port == node_port and host == _host_key(node_host) for node_host, node_port in nodes)


def _host_key(host: str) -> str:
    """One spelling per host: lower case, no brackets or final dot, an IP in its canonical form, and every
    loopback (or unspecified, which reaches this machine too) address or name as `loopback`."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost") or name in ("localhost.localdomain", "ip6-localhost"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "loopback" if ip.is_loopback or ip.is_unspecified else str(ip)


def _addresses(listed: str) -> list[tuple[str, int]]:
    out = []
    for item in listed.split(","):
        if item.strip():
            host, _, port = item.strip().rpartition(":")
            out.append((host, int(port)))
    return out


def sentinel_url(settings: Settings) -> str:
    """Celery's and kombu's form: `sentinel://[:password@]host:port/db;sentinel://...` (master name apart)."""
    parts = urlsplit(settings.redis_url)
    auth = ""
    if parts.password is not None:
        auth = f"{parts.username or ''}:{parts.password}@"
    db = (parts.path or "/0").lstrip("/") or "0"
    return ";".join(f"sentinel://{auth}{host}:{port}/{db}" for host, port in settings.sentinels)


def _explain(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        # A check across fields (no location) names its variables in its own message.
        variable = f"BATON_{str(problem['loc'][0]).upper()}" if problem["loc"] else "settings"
        raw = os.environ.get(variable)
        shown = f" (got {raw!r})" if raw is not None else ""
        lines.append(f"{variable}: {problem['msg']}{shown}")
    return "invalid settings: " + "; ".join(lines)


def load_settings() -> Settings:
    """Read the environment now; raises `SettingsError` naming each bad variable."""
    try:
        return Settings()
    except ValidationError as err:
        raise SettingsError(_explain(err)) from None


@lru_cache(maxsize=1)
def current() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
