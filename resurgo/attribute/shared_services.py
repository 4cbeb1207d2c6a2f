"""A shared service's outage, when a stage blamed the first node that happened to log it.

attribution-labels.md tie-breaker 5: shared-service outages (file system, registry) have no
culprit node and are requeued once recovered. Two ways the engine otherwise names a node:

- the job's output itself says the service is down: the container registry answered the
  image import with a server error (enroot's `URL ... returned error code: 503`), however many
  nodes srun reported on; or file-system client errors (ESHUTDOWN, EIO, a stale handle) on a
  network file-system path from ranks on two or more nodes (one node's client alone is that
  node's, see `node_local.path_error_after_fs_loss`);
- the job stopped advancing while the file system was lost from two or more of its nodes
  (their kernel logs: `Lustre: ... Connection to ... was lost`), and was then cancelled, timed
  out or aborted by the collectives' watchdog: the labels' hang ("progress stopped first ...
  however it ended"), the service's, not the owner's cancel;
- the job's code failed to import or read its files (`ModuleNotFoundError`, `ImportError`, EIO,
  ESTALE) while the file system those files live on was lost from its nodes (their kernel logs:
  `nfs: server home01 not responding, still trying`, `LustreError: ...`): a Python environment
  on NFS or Lustre (a venv in /home) answers imports with ModuleNotFoundError or EIO when the
  server stops answering (a soft mount returns EIO after `retrans` timeouts: nfs(5)), so the
  error is the file system's, not a broken user environment (THUDM/slime#326). Without such
  file-system evidence an import error stays the application's.
"""

from __future__ import annotations

import re
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.events import Event
from resurgo.attribute.liveness import progress_times
from resurgo.attribute.shared_network import switch_took_nodes_down
from resurgo.contracts import AnomalyKind, Category

# The registry refusing service (catalogue: container_registry_unavailable, scope shared).
REGISTRY_OUTAGE = frozenset({"container_registry_unavailable"})
# File-system client errors a process sees when its node's client lost the servers.
FS_CLIENT_ERRORS = frozenset({"fs_transport_shutdown", "fs_io_error", "fs_stale_handle"})
# Node-side signs of the file-system client losing its servers (scope shared in the catalogue).
FS_LOST = frozenset({"lustre_connection_lost", "lustre_error", "nfs_not_responding"})
# A path on node-local storage is that node's disk, never a shared service.
_LOCAL_PATH = re.compile(
    r"(?:^|['\"\s=])(?:/tmp|/var/tmp|/dev/shm|/local|/localscratch|/scratch/local|/raid|/nvme|"
    r"/mnt/local|/lscratch|/ssd)\b"
)
# How long before the first sign of the outage the last progress line may be and still be the
# job stopping because of it (one logging interval; the client waits before it gives up).
STALL_SLACK_SECONDS = 300.0
# The most ranks one node runs (one per GPU; 16-GPU boards are the largest in common use).
MAX_RANKS_PER_NODE = 16


def shared_outage(a: Analysis, v: Verdict) -> Verdict:
    """`v` without its culprits where the job's own output shows a shared service failing."""
    v = switch_took_nodes_down(a, import_error_on_lost_fs(a, v))
    if v.category != Category.SYSTEM_SOFTWARE or not v.culprits or v.key.startswith("shared|"):
        return v
    cut = a.kill_order
    failed = [
        e for e in a.events
        if e.origin == "job" and e.root and (cut is None or e.order <= cut)
    ]  # fmt: skip
    registry = [e for e in failed if e.match.id in REGISTRY_OUTAGE]
    if registry:
        return _shared(v, registry[0], "the container registry answered with a server error")
    fs = [
        e for e in failed
        if e.match.id in FS_CLIENT_ERRORS and not _LOCAL_PATH.search(e.message)
    ]  # fmt: skip
    nodes = _nodes_of(a, fs)
    if len(nodes) >= 2:
        return _shared(v, fs[0], f"ranks on {len(nodes)} nodes lost the same file system at once")
    lost = _fs_lost(a)
    job = a.job_nodes()
    if fs and job and set(v.culprits) <= set(lost) and set(job) <= set(lost):
        # Every node the job ran on (a one-node job's only node) saw the servers fail: no
        # node is left that kept the file system, so it is the service's (an OST's outage
        # answers every client's writes with ESTALE).
        return _shared(v, fs[0], "every node of the job lost the file system at once")
    return v


# Errors of a program importing or reading its own files: the file system's when it was lost.
_FILE_ACCESS = re.compile(
    r"\b(?:ModuleNotFoundError|ImportError|FileNotFoundError)\b|cannot open shared object file|"
    r"No such file or directory|Input/output error|Stale file handle|\[Errno (?:2|5|116)\]"
)
# How long before the job's error its nodes' file-system loss may start (a hard mount retries
# for minutes before anything fails) and how late it may be logged after it.
FS_LOSS_BEFORE_SECONDS = 3600.0
FS_LOSS_AFTER_SECONDS = 600.0


def import_error_on_lost_fs(a: Analysis, v: Verdict) -> Verdict:
    """An application verdict whose error is a failed import or file read, while the file
    system was lost from two or more of the job's nodes (or from its only node): the shared
    file system's outage, no culprit, requeued once it is back."""
    if v.category != Category.APPLICATION:
        return v
    shown = {(x.source, x.line_no) for x in v.evidence}
    failing = [
        e for e in a.events
        if e.origin == "job" and e.root and (e.line.source, e.line.line_no) in shown
        and _FILE_ACCESS.search(e.message) and not _LOCAL_PATH.search(e.message)
    ]  # fmt: skip
    if not failing:
        return v
    lost = _fs_lost(a)
    job = a.job_nodes()
    if len(lost) < 2 and not (lost and job and set(job) <= set(lost)):
        return v
    where = {n for e in failing if isinstance(n := event_node(a, e), str)}
    if not where <= set(lost) or not _around(failing, list(lost.values())):
        return v
    first = lost[min(lost)]
    return Verdict(
        Category.SYSTEM_SOFTWARE, f"shared|{first.match.id}",
        f"{v.summary}: {', '.join(sorted(lost))} lost the file system the job's files live on "
        f"({first.match.id}), a shared service's outage, no node to exclude", 0.75,
        ranks=v.ranks, evidence=[first.line, *v.evidence], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


def _fs_lost(a: Analysis) -> dict[str, Event]:
    """The first sign of the file-system client losing its servers, per node of the job."""
    lost: dict[str, Event] = {}
    for e in [*a.node_events, *a.events]:
        if e.match.id in FS_LOST and e.node is not None and a.in_job(e.node):
            lost.setdefault(e.node, e)  # (the node's own logs first, in their order)
    return lost


def _around(failing: list[Event], lost: list[Event]) -> bool:
    """The loss was logged near the failure, where both are dated (else: the bundle's window)."""
    fails = [t for e in failing if (t := _dated(e)) is not None]
    seen = [t for e in lost if (t := _dated(e)) is not None]
    if not fails or not seen:
        return True
    return any(
        -FS_LOSS_AFTER_SECONDS <= _seconds(fail, loss) <= FS_LOSS_BEFORE_SECONDS
        for fail in fails for loss in seen
    )  # fmt: skip


# A full date and time in a line (ISO 8601, or Python logging's `%Y/%m/%d %H:%M:%S`).
_STAMP = re.compile(r"\b(\d{4})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d):(\d\d)\b")


def _dated(e: Event) -> datetime | None:
    if e.when is not None:
        return e.when
    if (m := _STAMP.search(e.line.text[:400])) is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(x) for x in m.groups())
        return datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def _seconds(later: datetime, earlier: datetime) -> float:
    if (later.tzinfo is None) != (earlier.tzinfo is None):
        later, earlier = later.replace(tzinfo=None), earlier.replace(tzinfo=None)
    return (later - earlier).total_seconds()


def _shared(v: Verdict, e: Event, why: str) -> Verdict:
    return Verdict(
        Category.SYSTEM_SOFTWARE, f"shared|{e.match.id}",
        f"{v.summary}: {why}, a shared service's outage, no node to exclude", 0.75,
        ranks=v.ranks, evidence=[e.line, *v.evidence], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


def _nodes_of(a: Analysis, events: list[Event]) -> set[str | int]:
    """The nodes the events surely came from: names where a task label or a host prefix places
    them; else, where only global ranks are known (several to a node, node-major), node
    indexes under Slurm's block layout, kept only when every plausible number of ranks per
    node (from what the seen ranks need up to MAX_RANKS_PER_NODE) puts them on 2+ nodes."""
    placed = {n for e in events if e.task is not None and (n := event_node(a, e)) is not None}
    if placed or not events:
        return set(placed)
    hosts = a.job_nodes()
    ranks = sorted({e.rank for e in events if e.rank is not None})
    tasks = len(a.topo.tasks_seen) or len(hosts)
    if not ranks or not hosts or max(ranks) < tasks:
        return {n for e in events if (n := event_node(a, e)) is not None}
    least = -(-(max(ranks) + 1) // len(hosts))
    spans: list[set[str | int]] = [
        {r // per_node for r in ranks}
        for per_node in range(least, max(least, MAX_RANKS_PER_NODE) + 1)
    ]  # fmt: skip
    return min(spans, key=len)


def hung_on_shared_service(a: Analysis, outcome: str | None) -> Verdict | None:
    """The job stopped advancing as its file system was lost from two or more of its nodes,
    and was ended later (a cancel, the time limit, the watchdog): a hang of the service's."""
    if outcome not in ("owner_cancelled", "admin_cancelled", "timeout", None) or a.running:
        return None
    lost: dict[str, Event] = {}
    for e in a.node_events:
        if not (e.match.id in FS_LOST and e.node is not None and a.in_job(e.node) and e.when):
            continue
        seen = lost.get(e.node)
        if seen is None or seen.when is None or e.when < seen.when:
            lost[e.node] = e
    if len(lost) < 2:
        return None
    start = min(e.when for e in lost.values() if e.when is not None)
    times = progress_times(a)
    if len(times) < 2 or not _stalled_at(times[-1], start):
        return None
    # The job's own output shows nothing failing, only waiting (collective timeouts): an
    # error of its own (a read or a checkpoint write failing with EIO) is a crash.
    if any(
        e.origin == "job" and e.root and e.serious and e.match.kind == AnomalyKind.CRASH
        for e in a.events
    ):
        return None
    first = min(lost.values(), key=lambda e: e.when or start)
    nodes = ", ".join(sorted(lost))
    return Verdict(
        Category.SYSTEM_SOFTWARE, f"shared|{first.match.id}",
        f"progress stopped as {nodes} lost the file system ({first.match.id}): a shared "
        "service's outage hung the job, no node to exclude", 0.75,
        evidence=[first.line, *[e.line for e in lost.values() if e is not first][:4]],
        kind=AnomalyKind.HANG,
    )  # fmt: skip


def _stalled_at(last: datetime, start: datetime) -> bool:
    if (last.tzinfo is None) != (start.tzinfo is None):
        last, start = last.replace(tzinfo=None), start.replace(tzinfo=None)
    # (Up to a minute after it: the client waits for recovery before reads block for good.)
    return -60.0 <= (start - last).total_seconds() <= STALL_SLACK_SECONDS
