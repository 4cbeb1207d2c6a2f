"""A /dev/shm too small for NCCL on every node of the job, or for its DataLoader workers in a
container the job starts with the 64 MB default: whose setting it is.

NCCL sizes a shared-memory segment per intra-node peer in /dev/shm (`Call to posix_fallocate
failed : No space left on device`, `failed to extend /dev/shm/nccl-...`; NVIDIA/nccl#290,
#342: Docker's 64 MB default). On one node that is the node's state (another job's leftover
segments: `name_full_disk` names it). On every node of the job it is the size the container
gives /dev/shm, the same on any nodes, so a retry cannot help (attribution-labels.md
tie-breaker 6 decides whose):

- the job starts its own container (`docker run`, `podman run`, Apptainer) without
  `--shm-size`/`--ipc=host`: the job's launch line, application, stop;
- an operator's note says the site's container template or runtime sets /dev/shm: the site's
  configuration on every node, system_software naming them all, stop.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.contracts import Category, LogLine
from resurgo.policy.decide import NO_RETRY_HELPS_KEY

SHM_FAULTS = frozenset({"nccl_shm_extend_failed", "dataloader_shm_bus_error"})
_OWN_CONTAINER = re.compile(r"\b(?:docker|podman) run\b|\b(?:singularity|apptainer) (?:exec|run)\b")
_SHM_OPTIONS = re.compile(r"--shm-size\b|--ipc[= ]host\b")
_SHM_SIZE = re.compile(r"--shm-size[= ]\S+")
_HOST_IPC = re.compile(r"--ipc[= ]host\b")
_SITE_SHM_NOTE = re.compile(
    r"(?i)\bsite\b.{0,160}(?:/dev/shm|\bshm\b)|(?:/dev/shm|\bshm\b).{0,160}\bsite\b"
)
# The container's /dev/shm at Docker's 64 MB default, as NGC images' banner says at start (`NOTE:
# The SHMEM allocation limit is set to the default of 64MB.`) or as `df -h /dev/shm` shows it.
_DEFAULT_SHM = re.compile(
    r"\bSHMEM allocation limit is set to the default of 64MB\b"
    r"|^\S+\s+(?:64M|65536)\s+\S+\s+\S+\s+\d{1,3}%\s+/dev/shm\s*$"
)
# A node's own `df -h /dev/shm` showing it full (`tmpfs  64M  64M  0 100% /dev/shm`).
_SHM_FULL = re.compile(r"^\S+\s+\S+\s+\S+\s+\S+\s+(?:99|100)%\s+/dev/shm\s*$")
LAUNCH_LINES = 200


def shm_too_small(a: Analysis, v: Verdict) -> Verdict:
    """`v` decided by who sets /dev/shm's size, when NCCL ran out of it on every node."""
    if v.category not in (Category.SYSTEM_SOFTWARE, Category.UNKNOWN, Category.HARDWARE_NETWORK):
        return v
    faults = [e.line for e in a.events if e.origin == "job" and e.match.id in SHM_FAULTS]
    nodes = {
        n for e in a.events
        if e.origin == "job" and e.match.id in SHM_FAULTS and isinstance(n := event_node(a, e), str)
    }  # fmt: skip
    for host, lines in a.node_logs.items():
        full = next((x for x in lines if _SHM_FULL.match(x.text.strip())), None)
        if full is not None and (node := a.topo.hosts.canonical(host)) is not None:
            nodes.add(node)
            faults.append(full)
    job = set(a.job_nodes())
    head = [*a.header, *a.lines[:LAUNCH_LINES]]
    # (A job of one node has no peer to tell the node's state from the job's: its own
    # container seen starting with the 64 MB default decides; its workers fail on any node.
    # Of several nodes, one alone failing is that node's state, whatever the container.)
    launch = _own_launch(head)
    # (The size the job's own container command gives /dev/shm, `--shm-size=64m`, is its
    # choice as much as Docker's default is: whose setting, not how big.)
    size = None
    if launch is not None and not _HOST_IPC.search(launch.text):
        size = _SHM_SIZE.search(launch.text)
    # (A `docker run` of the job's own without --shm-size or --ipc=host starts at Docker's
    # 64 MB default by definition: no banner needed to say so.)
    default = len(job) <= 1 and (
        size is not None
        or any(_DEFAULT_SHM.search(x.text.strip()) for x in head)
        or (launch is not None and not _SHM_OPTIONS.search(launch.text))
    )
    if not faults or not ((len(job) >= 2 and job <= nodes) or default):
        return v
    site = next(
        (x for x in head if x.text.lstrip().startswith("#") and _SITE_SHM_NOTE.search(x.text)), None
    )
    if site is not None and len(job) >= 2 and job <= nodes:
        culprits = sorted(job)
        return Verdict(
            Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
            f"{faults[0].text.strip()[:160]}: /dev/shm is too small for NCCL on every node and "
            f"the site's container setup sizes it ({', '.join(culprits)})", 0.8,
            culprits=culprits, ranks=v.ranks, evidence=[site, faults[0], *v.evidence],
            kind=v.kind, outcome=v.outcome,
        )  # fmt: skip
    if launch is not None and size is not None:
        return Verdict(
            Category.APPLICATION, "job_container|shm_too_small",
            f"{faults[0].text.strip()[:160]}: /dev/shm is too small in the container the job "
            f"starts with {size.group(0)}, on any node", 0.85, ranks=v.ranks,
            evidence=[launch, faults[0], *v.evidence], kind=v.kind, outcome=v.outcome,
        )  # fmt: skip
    if launch is None or _SHM_OPTIONS.search(launch.text):
        return v
    return Verdict(
        Category.APPLICATION, "job_container|shm_too_small", f"{faults[0].text.strip()[:160]}"
        ": /dev/shm is too small in the container the job starts without --shm-size or "
        "--ipc=host (Docker's default is 64 MB), on any node", 0.85, ranks=v.ranks,
        evidence=[launch, faults[0], *v.evidence], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


def _own_launch(head: list[LogLine]) -> LogLine | None:
    """The job's own container command: its script's trace (`+ srun ... docker run`) or the
    first such line (a container's banner quoting `docker run` comes after it)."""
    launches = [x for x in head if _OWN_CONTAINER.search(x.text)]
    traced = [x for x in launches if x.text.lstrip().startswith(("+", "$")) or "srun" in x.text]
    found = traced or launches
    return found[0] if found else None
