# syntax=docker/dockerfile:1
# A whole Slurm cluster in one container (munged + slurmctld + NODES slurmd's), set up and
# started by the SAME scripts as the native demo: infra/slurm/install.sh at build time,
# infra/slurm/start.sh/status.sh/stop.sh at run time (infra/docker/slurm-entrypoint.sh).
# Also carries Resurgo and CPU PyTorch, because the demo job (infra/demo/train.sbatch) runs
# here, on the cluster's nodes, with <repo>/.venv/bin/python.
#   docker build -f infra/docker/slurm.Dockerfile -t resurgo-slurm:0.1.0 .
# Runs as root: the generated slurm.conf has SlurmUser=root/SlurmdUser=root, slurmd must start
# jobs as their owners, and munged must own its key. Nothing else in the quickstart is root
# except the containers that talk to this cluster as its administrator (see docker-compose.yml).

ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/resurgo/.venv/bin:$PATH \
    RESURGO_PYTHON=/opt/resurgo/.venv/bin/python \
    RESURGO_REPO=/opt/resurgo \
    RESURGO_CONFIG=/etc/resurgo/resurgo.toml \
    CLUSTER=local \
    NODES=4 \
    CPUS=4

# Tools start.sh/status.sh/stop.sh use (ss, pgrep, flock, runuser, hostname) and Python 3.11.
# The base image tag pins the Debian release; exact package versions are not pinned because
# Debian's security updates replace them.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       ca-certificates hostname iproute2 procps util-linux python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

# Slurm 22.05 + munge exactly as on a native host. The munge key install.sh creates here is
# deleted: a key baked into an image would be shared by everyone who pulls it. The entrypoint
# runs install.sh again at start, which creates a fresh key in the munge-key volume.
COPY infra/slurm /opt/resurgo/infra/slurm
RUN bash /opt/resurgo/infra/slurm/install.sh \
    && rm -f /etc/munge/munge.key \
    && rm -rf /var/lib/apt/lists/*

# Resurgo (for the demo submitter and the audit follow-up) and CPU PyTorch for the trainer.
WORKDIR /opt/resurgo
COPY pyproject.toml README.md ./
# resurgo/ links the other folders in (one import root, resurgo.*); COPY keeps the links.
COPY resurgo ./resurgo
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY api ./api
COPY cli ./cli
COPY devstack ./devstack
RUN python3 -m venv .venv \
    && .venv/bin/pip install --upgrade pip \
    && .venv/bin/pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}" \
    && .venv/bin/pip install . \
    && rm -rf build ./*.egg-info \
    && .venv/bin/python -c "import torch, resurgo.cli.main; print('torch', torch.__version__)"

COPY infra/demo ./infra/demo
COPY infra/docker/slurm-entrypoint.sh infra/docker/entrypoint.sh infra/docker/demo_trainer.py infra/docker/healthcheck.py ./infra/docker/
COPY infra/docker/resurgo.toml /etc/resurgo/resurgo.toml

HEALTHCHECK --interval=15s --timeout=10s --start-period=60s --retries=4 \
    CMD ["bash", "/opt/resurgo/infra/slurm/status.sh", "--quiet"]
ENTRYPOINT ["/opt/resurgo/infra/docker/slurm-entrypoint.sh"]
CMD []
