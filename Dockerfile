# Baton worker / Flower image.
#
# One image serves every Python service in docker-compose.yml; the default CMD is a Celery
# worker, and compose overrides the command for each service. No secrets are baked in: all
# settings (BATON_REDIS_URL, ANTHROPIC_API_KEY, ...) arrive as environment variables at run time.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap: run_command's sandbox (BATON_SANDBOX=bwrap, the default). prlimit and setpriv come with
# util-linux, which Debian always has. The container must still allow user namespaces (see docker-compose.yml).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

# Unprivileged runtime user with a fixed uid/gid (handy for volume permissions).
RUN groupadd --system --gid 10001 baton \
    && useradd --system --uid 10001 --gid baton --create-home --home-dir /home/baton \
       --shell /usr/sbin/nologin baton

# Install the package (and its dependencies) into site-packages from a throw-away source copy.
# README.md is copied because pyproject.toml declares it as the project readme.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY config/ config/
COPY tasks/ tasks/
RUN pip install --no-cache-dir . \
    && cd / && rm -rf /src

# Run from a directory without source files so `celery -A tasks` imports the installed package.
# Non-root also matters to the sandbox: the kernel applies its process limit (RLIMIT_NPROC) to no uid 0 process.
USER baton
WORKDIR /home/baton
# Flower's options (task columns for retries and their reason): Flower reads ./flowerconfig.py by default.
COPY flowerconfig.py /home/baton/flowerconfig.py

# Celery handles SIGTERM as a warm shutdown: running runs checkpoint and requeue, then it exits.
STOPSIGNAL SIGTERM
CMD ["celery", "-A", "tasks", "worker", "-l", "info"]
