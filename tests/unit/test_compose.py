"""Structural tests for the production deployment files (docker-compose.yml, Dockerfile, .env.example).

No Docker engine is needed: the compose file is parsed with PyYAML and checked for the properties the
deployment relies on. When a compose binary is installed, `config -q` is run as well.
"""

import os
import re
import runpy
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
ENV_EXAMPLE = REPO / ".env.example"

# A whole value that is one compose variable reference: ${VAR}, ${VAR:-}, ${VAR:?message}, ...
# A secret may carry an *empty* default or a required-message, never a literal default.
SECRET_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-|:?\?[^}]*)?\}$")
SECRET_KEY = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|APIKEY|CREDENTIAL|AUTH", re.IGNORECASE)
URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:(?P<password>[^@]*)@", re.IGNORECASE)
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

DUMMY_ENV = {
    "REDIS_PASSWORD": "dummy-redis-password",
    "FLOWER_USER": "dummy-user",
    "FLOWER_PASSWORD": "dummy-flower-password",
    "ANTHROPIC_API_KEY": "",
    "RABBITMQ_PASSWORD": "dummy-rabbitmq-password",
}
RABBITMQ_OVERRIDE = REPO / "docker-compose.rabbitmq.yml"


@pytest.fixture(scope="module")
def compose():
    with COMPOSE_FILE.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@pytest.fixture(scope="module")
def services(compose):
    return compose["services"]


def argv(command):
    """A compose `command`/healthcheck string or list as an argument list."""
    if command is None:
        return []
    if isinstance(command, str):
        return shlex.split(command)
    return [str(part) for part in command]


def env_dict(service):
    """A service's `environment` as a dict, whether written as a mapping or a KEY=VALUE list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in env)
        return dict(pairs)
    return dict(env)


def parse_duration(value):
    """Seconds in a compose duration such as "30s", "1m", "1m30s", "500ms" (a bare number is seconds)."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    parts = DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"not a compose duration: {value!r}")
    return sum(float(number) * DURATION_UNITS[unit] for number, unit in parts)


def option_value(args, option):
    """The value of `--option value` or `--option=value` in an argument list, or None."""
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def is_celery_worker(service):
    args = argv(service.get("command"))
    return args[:4] == ["celery", "-A", "tasks", "worker"]


def worker_services(services):
    return {name: svc for name, svc in services.items() if is_celery_worker(svc)}


def all_strings(node):
    """Every key and scalar in a parsed YAML tree, as strings."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from all_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from all_strings(item)
    elif node is not None:
        yield str(node)


def test_parse_duration_understands_compose_durations():
    """The duration parser used below reads the compose forms it must judge ("30s", "1m", "1m30s")."""
    assert parse_duration("30s") == 30
    assert parse_duration("1m") == 60
    assert parse_duration("1m30s") == 90
    assert parse_duration("1500ms") == 1.5
    assert parse_duration(45) == 45
    with pytest.raises(ValueError):
        parse_duration("thirty seconds")


def test_redis_is_durable_and_never_evicts(services):
    """Redis persists with AOF fsynced every second and refuses writes rather than evicting keys when full."""
    args = argv(services["redis"].get("command"))
    assert args[0] == "redis-server"
    assert option_value(args, "--appendonly") == "yes"
    assert option_value(args, "--appendfsync") == "everysec"
    assert option_value(args, "--maxmemory-policy") == "noeviction"


def test_redis_password_comes_from_environment(services):
    """The Redis password is a required `${VAR}` reference, never a literal written in the file."""
    password = option_value(argv(services["redis"].get("command")), "--requirepass")
    assert password is not None, "redis must run with --requirepass"
    assert SECRET_REF.match(password), f"--requirepass must be a ${{VAR}} reference, got {password!r}"
    assert ":?" in password, "REDIS_PASSWORD should be required (${REDIS_PASSWORD:?...})"


def test_redis_data_on_named_volume_with_healthcheck(compose, services):
    """Redis keeps /data on a named volume (survives container re-creation) and has a ping healthcheck."""
    redis = services["redis"]
    mounts = [str(volume).split(":") for volume in redis.get("volumes", [])]
    data_sources = [parts[0] for parts in mounts if len(parts) >= 2 and parts[1] == "/data"]
    assert data_sources, "redis needs a volume mounted at /data"
    assert data_sources[0] in (compose.get("volumes") or {}), "the /data volume must be a named volume"
    test = " ".join(argv(redis["healthcheck"]["test"]))
    assert "redis-cli" in test and "ping" in test


def test_two_celery_workers(services):
    """At least two services run `celery -A tasks worker`, each with its own node name (--hostname)."""
    workers = worker_services(services)
    assert len(workers) >= 2, f"expected two worker services, found {sorted(workers)}"
    node_names = [option_value(argv(svc["command"]), "--hostname") for svc in workers.values()]
    assert None not in node_names, "every worker needs an explicit --hostname"
    assert len(set(node_names)) == len(node_names), f"worker node names collide: {node_names}"


def test_workers_drain_on_sigterm_within_grace_period(services):
    """Workers get SIGTERM (Celery's warm shutdown) and 10-120 s to checkpoint and requeue before SIGKILL."""
    for name, svc in worker_services(services).items():
        assert svc.get("stop_signal") == "SIGTERM", name
        assert "stop_grace_period" in svc, f"{name} has no stop_grace_period (the default is only 10s)"
        grace = parse_duration(svc["stop_grace_period"])
        assert 10 <= grace <= 120, f"{name}: stop_grace_period {grace}s is outside 10-120 s"


def test_workers_healthcheck_pings_their_own_node(services):
    """Each worker's healthcheck pings its own Celery node (the --hostname prefix), with bounded timings."""
    for name, svc in worker_services(services).items():
        healthcheck = svc.get("healthcheck")
        assert healthcheck, f"{name} has no healthcheck"
        assert not healthcheck.get("disable", False), name
        for key in ("interval", "timeout", "retries"):
            assert key in healthcheck, f"{name} healthcheck lacks {key}"
        test = " ".join(argv(healthcheck["test"]))
        assert "celery -A tasks inspect ping" in test, name
        node_prefix = option_value(argv(svc["command"]), "--hostname").split("@", 1)[0]
        destination = option_value(shlex.split(test.replace("CMD-SHELL ", "", 1)), "-d")
        assert destination is not None, f"{name} healthcheck must ping one node with -d"
        assert destination.startswith(node_prefix + "@"), f"{name} pings {destination}, not its own node"
        # `$HOSTNAME` must reach the container shell: in compose it is written `$$HOSTNAME`.
        host_part = destination.split("@", 1)[1]
        assert not re.search(r"(?<!\$)\$(?!\$)", host_part), f"{name}: write $$ for container variables"


def test_workers_built_from_this_repository(services):
    """Worker images are built from this repository's Dockerfile (build context `.`)."""
    for name, svc in worker_services(services).items():
        build = svc.get("build")
        context = build.get("context") if isinstance(build, dict) else build
        assert context in (".", "./"), f"{name} must be built from this repository, got build={build!r}"
    assert DOCKERFILE.is_file()


def test_workers_depend_on_healthy_redis_and_restart(services):
    """Workers start only after Redis is healthy and are restarted unless explicitly stopped."""
    for name, svc in worker_services(services).items():
        depends = svc.get("depends_on")
        assert isinstance(depends, dict) and "redis" in depends, name
        assert depends["redis"].get("condition") == "service_healthy", name
        assert svc.get("restart") == "unless-stopped", name


def test_workers_get_settings_from_environment(services):
    """Workers reach Redis through BATON_REDIS_URL (password from the environment) and get the provider key."""
    for name, svc in worker_services(services).items():
        env = env_dict(svc)
        url = env.get("BATON_REDIS_URL")
        assert url and url.startswith("redis://") and "@redis:6379/" in url, f"{name}: {url!r}"
        assert "ANTHROPIC_API_KEY" in env, name
        assert "BATON_PROVIDER" in env, name


def test_no_literal_secrets_in_environment(services):
    """Every secret-looking environment value (keys, passwords, URL credentials) is a `${VAR}` reference."""
    checked = 0
    for name, svc in services.items():
        for key, value in env_dict(svc).items():
            if value is None:  # key-only entry: passed through from the host environment
                continue
            value = str(value)
            if SECRET_KEY.search(key):
                checked += 1
                assert SECRET_REF.match(value), f"{name}.{key} holds a literal secret: {value!r}"
            url = URL_PASSWORD.match(value)
            if url:
                checked += 1
                password = url.group("password")
                assert SECRET_REF.match(password), f"{name}.{key} has a literal password in its URL"
    assert checked >= 3, "expected to check the API key and the Redis URL credentials"


def test_flower_basic_auth_from_environment(services):
    """Flower runs for the `tasks` app on port 5555 behind --basic-auth built from `${VAR}` references."""
    flower = services["flower"]
    args = argv(flower.get("command"))
    assert args[:4] == ["celery", "-A", "tasks", "flower"]
    auth = option_value(args, "--basic-auth")
    assert auth is not None, "flower must run with --basic-auth"
    pair = re.fullmatch(r"(?P<user>\$\{[^}]*\}):(?P<password>\$\{[^}]*\})", auth)
    assert pair, f"--basic-auth must be ${{USER_VAR}}:${{PASSWORD_VAR}}, got {auth!r}"
    assert SECRET_REF.match(pair["user"]) and SECRET_REF.match(pair["password"]), auth
    assert any(str(port).split(":")[-1] == "5555" for port in flower.get("ports", []))
    assert "/healthcheck" in " ".join(argv(flower["healthcheck"]["test"]))


def test_flower_reads_the_shipped_config_with_retry_columns(services):
    """Flower's --conf names the file the image copies from this repository's flowerconfig.py (so a missing copy
    stops Flower at start), and that file's task list shows the retry count, the last exception and the args,
    each a column Flower knows (it silently drops an unknown one)."""
    conf = option_value(argv(services["flower"].get("command")), "--conf")
    assert conf is not None, "flower must name its config file with --conf"
    copies = {}
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and len(parts) == 3:
            copies[parts[2]] = parts[1]
    assert copies.get(conf) == "flowerconfig.py", f"the Dockerfile does not copy flowerconfig.py to {conf}"
    columns = [c.strip() for c in runpy.run_path(str(REPO / "flowerconfig.py"))["tasks_columns"].split(",")]
    assert {"retries", "exception", "args"} <= set(columns), columns
    known = getattr(pytest.importorskip("flower.views.tasks"), "TASK_COLUMNS", None)
    if known is not None:
        assert set(columns) <= set(known), f"columns Flower does not know: {sorted(set(columns) - set(known))}"


def test_no_service_uses_pickle(compose):
    """Nothing in the compose file (commands, environment, anchors) mentions pickle serialization."""
    offenders = [text for text in all_strings(compose) if "pickle" in text.lower()]
    assert not offenders, f"pickle found in docker-compose.yml: {offenders}"


def test_env_example_defines_required_variables_without_real_secrets(compose):
    """.env.example sets every variable the compose file requires (`${VAR:?...}`); the API key stays empty."""
    required = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?", COMPOSE_FILE.read_text(encoding="utf-8")))
    assert required >= {"REDIS_PASSWORD", "FLOWER_USER", "FLOWER_PASSWORD"}
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert "example" in text.lower().split("\n", 1)[0], "the first line must say this is an example"
    values = dict(
        line.split("=", 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )
    assert required <= values.keys(), f"missing in .env.example: {sorted(required - values.keys())}"
    assert values.get("ANTHROPIC_API_KEY", "") == "", "ANTHROPIC_API_KEY must be empty in the example"


def test_dockerfile_runs_unprivileged_without_baked_secrets():
    """The image installs the package with pip, runs as a non-root user, and bakes in no secret ENV/ARG."""
    lines = [line.strip() for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0].startswith("FROM python:3.11-slim")
    text = "\n".join(instructions)
    assert "pip install --no-cache-dir ." in text
    assert "PYTHONUNBUFFERED=1" in text
    users = [line.split(None, 1)[1] for line in instructions if line.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the final USER must not be root"
    for line in instructions:
        if line.upper().startswith(("ENV ", "ARG ")):
            assert not SECRET_KEY.search(line), f"secret-looking build setting: {line}"
    assert 'CMD ["celery", "-A", "tasks", "worker"' in text
    dockerignore = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".env" in dockerignore and ".git" in dockerignore


def compose_commands():
    """Installed compose front-ends: docker-compose v1 and/or the `docker compose` v2 plugin."""
    found = []
    if shutil.which("docker-compose"):
        found.append(["docker-compose"])
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            found.append(["docker", "compose"])
    return found


@pytest.mark.parametrize("front_end", ["docker-compose", "docker compose"])
@pytest.mark.parametrize("files", [[COMPOSE_FILE], [COMPOSE_FILE, RABBITMQ_OVERRIDE]], ids=["redis", "rabbitmq"])
def test_compose_config_validates(front_end, files):
    """The compose binary itself accepts the file, and with the RabbitMQ override (`config -q` exits 0), when
    given dummy secrets."""
    command = front_end.split()
    if command not in compose_commands():
        pytest.skip(f"`{front_end}` is not installed")
    env = {**os.environ, **DUMMY_ENV}
    result = subprocess.run(
        [*command, *(arg for f in files for arg in ("-f", str(f))), "config", "-q"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_workers_can_run_the_sandbox_without_privilege(services):
    """Workers get exactly what bubblewrap needs as an unprivileged user (namespaces, mount, a fresh /proc)
    and nothing that would hand commands the host: no `privileged`, no added capabilities."""
    for name, svc in worker_services(services).items():
        assert not svc.get("privileged"), name
        assert not svc.get("cap_add"), name
        assert set(svc.get("security_opt") or []) == {
            "seccomp=unconfined",
            "apparmor=unconfined",
            "systempaths=unconfined",
        }, name
        assert "BATON_SANDBOX" in env_dict(svc), name


RABBITMQ_FILE = REPO / "docker-compose.rabbitmq.yml"


def test_the_rabbitmq_variant_points_every_celery_service_at_a_durable_rabbitmq():
    """docker-compose.rabbitmq.yml adds RabbitMQ (password from the environment, data on a volume, a
    healthcheck, consumer_timeout above the run wall clock) and gives workers and Flower an amqp:// broker."""
    with RABBITMQ_FILE.open(encoding="utf-8") as fh:
        override = yaml.safe_load(fh)
    services = override["services"]
    rabbit = services["rabbitmq"]
    assert SECRET_REF.match(env_dict(rabbit)["RABBITMQ_DEFAULT_PASS"])
    assert any(v.startswith("rabbitmq-data:") for v in rabbit["volumes"]) and "rabbitmq-data" in override["volumes"]
    assert rabbit["healthcheck"]["test"] and "ports" not in rabbit
    timeout_ms = int(env_dict(rabbit)["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"].split("consumer_timeout")[1].split()[0])
    assert timeout_ms / 1000 > 4 * 3600  # above BATON_RUN_WALL_CLOCK's default
    for name in ("worker1", "worker2", "flower"):
        assert env_dict(services[name])["BATON_BROKER_URL"].startswith("amqp://baton:${RABBITMQ_PASSWORD")
        assert services[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert "RABBITMQ_PASSWORD=" in ENV_EXAMPLE.read_text(encoding="utf-8")


@pytest.mark.parametrize("front_end", ["docker-compose", "docker compose"])
def test_compose_config_validates_with_the_rabbitmq_variant(front_end):
    """`config -q` accepts the base file with the RabbitMQ override, given dummy secrets."""
    command = front_end.split()
    if command not in compose_commands():
        pytest.skip(f"`{front_end}` is not installed")
    env = {**os.environ, **DUMMY_ENV, "RABBITMQ_PASSWORD": "dummy-rabbitmq-password"}
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "-f", str(RABBITMQ_FILE), "config", "-q"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr


def test_workers_run_the_threads_pool_with_a_stated_concurrency(services):
    """Chat and coding workers run Celery's threads pool (a turn mostly waits on the provider; a prefork child per
    turn in flight costs ~100 MiB) with an explicit -c, the figure README's "Choosing the pool" measured."""
    for name, svc in worker_services(services).items():
        args = argv(svc["command"])
        assert option_value(args, "-P") == "threads", f"{name} does not run the threads pool"
        concurrency = option_value(args, "-c")
        assert concurrency is not None and int(concurrency) >= 8, f"{name} needs an explicit -c"
