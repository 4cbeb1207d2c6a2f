"""Helpers several attribution stages share.

Which events may be the root cause (serious roots of non-victims before the scheduler's
kill), which peer a transport error names, and srun's exit lines for the blamed nodes. Used by
both the hardware stages and the root-failure/cascade stages, so they live below both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.bundle import line_time
from resurgo.attribute.events import ElasticFailure, Event, TaskExit
from resurgo.attribute.oom_blocks import oom_blocks
from resurgo.attribute.scheduler import node_failed
from resurgo.contracts import AnomalyKind, Category, LogLine

# Verdicts a node's own network or software configuration can explain better (the node joins
# of node_software and name_resolution refine only these).
NETWORKISH = frozenset({Category.HARDWARE_NETWORK, Category.SYSTEM_SOFTWARE, Category.UNKNOWN})


def _peer_node(a: Analysis, e: Event) -> str | None:
    address = re.sub(r"[<:\]].*$", "", e.match.groups.get("peer", "")).strip("[")
    node = a.topo.hosts.canonical(address) if address else None
    return node if node is not None and a.in_job(node) else None


def _exit_lines(a: Analysis, nodes: Iterable[str]) -> list[LogLine]:
    wanted = set(nodes)
    return [x.line for x in a.scan.exit_order if x.node in wanted and x.status != "terminated"]


# How close in time the same fault on several nodes must be to be one shared event.
SIMULTANEOUS_SECONDS = 5.0


def _shared_outage(events: Iterable[Event], nodes: Iterable[str]) -> bool:
    """The same node-side fault on two or more nodes within seconds of each other, and no other
    fault on the blamed nodes: one shared cause behind them (a leaf switch reload, a rack PDU,
    a file server), not each node's own fault, so no node is to blame (attribution-labels.md,
    tie-breaker 5)."""
    wanted = set(nodes)
    if len(wanted) < 2:
        return False
    first: dict[str, dict[str, float]] = {}
    spoke: set[str] = set()
    for e in events:
        if e.origin != "node" or e.node not in wanted:
            continue
        spoke.add(e.node)
        at = _event_seconds(e)
        if at is None:
            continue
        seen = first.setdefault(e.match.id, {})
        if e.node not in seen or at < seen[e.node]:
            seen[e.node] = at
    for times in first.values():
        together = max(times.values()) - min(times.values()) <= SIMULTANEOUS_SECONDS
        if len(times) >= 2 and together and set(times) >= spoke:
            return True
    return False


_SEL_TIME = re.compile(r"\|\s*(\d\d)/(\d\d)/(\d{4})\s*\|\s*(\d\d):(\d\d):(\d\d)\s*\|")


def _event_seconds(e: Event) -> float | None:
    """When a node-side event happened, for comparing nodes with each other: its parsed time,
    else a syslog stamp read with a placeholder year, else an IPMI SEL row's date and time."""
    if e.when is not None:
        return e.when.timestamp()
    at = line_time(e.line.text, year=2000)
    if at is not None:
        return at.timestamp()
    if m := _SEL_TIME.search(e.line.text):
        mon, day, year, h, mi, sec = (int(g) for g in m.groups())
        try:
            return datetime(year, mon, day, h, mi, sec).timestamp()
        except ValueError:
            return None
    return None


# System-software failures that live on one node (driver, device, mount, image, launch).
NODE_LOCAL_SYSTEM = frozenset(
    {
        "cuda_driver_insufficient",
        "cuda_device_busy",
        "cuda_system_not_ready",
        "illegal_instruction",
        "container_start_failed",
        "slurm_task_launch_failed",
        "slurm_prolog_failed",
        "fs_stale_handle",
        "fs_read_only",
        "dataloader_shm_bus_error",
        "nfs_not_responding",
        "lustre_error",
        "kernel_hung_task",
        "kernel_soft_lockup",
        # catalogue_system.json: a node's driver, file-system client, network configuration.
        "nvidia_driver_library_mismatch",
        "neuron_driver_missing",
        "rocblas_arch_library_missing",
        "memlock_limit_too_low",
        "fs_transport_shutdown",
        "dhcp_address_changed",
        "container_gpu_runtime_missing",
        "shm_name_exists",
        "lmod_not_installed",
        # NCCL's own detail of a node's network setup (catalogue_nccl.json).
        "nccl_no_socket_interface",
        "nccl_ib_no_device",
        # Both sides of a version mismatch report it; _version_drift names the odd node.
        "nccl_version_mismatch",
        # A port held on the rendezvous host (a leftover process): the next attempt should
        # rendezvous elsewhere.
        "address_in_use",
    }
)
# State only the node holds (its /dev/shm): a job of one node names it even when no line does.
# (A stale handle or a full disk may be a shared file system's, which the next node shares.)
# (So is its GPU driver's state: a fabric manager not running or not matching the driver, a
# kernel module of another version than its user-space library.)
NODE_OWN_STATE = frozenset(
    {
        "shm_name_exists",
        "cuda_system_not_ready",
        "nvidia_driver_library_mismatch",
        "lmod_not_installed",
    }
)
# A process's own native crash report: without a hardware fault on its host, it is the
# framework's or the node's software (failure taxonomy B.14).
NATIVE_CRASH = frozenset(
    {"segmentation_fault", "sigsegv_signal", "bus_error", "abort_signal", "python_fatal_signal"}
)


def _primary_candidates(a: Analysis, victims: set[str]) -> list[Event]:
    cut = a.kill_order
    out = []
    waited = min(
        (e.order for e in a.events if e.cascade and e.match.kind == AnomalyKind.HANG), default=None
    )
    for e in a.events:
        if not (e.root and e.serious) or e.actor in victims:
            continue
        if cut is not None and e.order > cut:
            continue
        if e.match.id == "abort_signal" and waited is not None and e.order > waited:
            # (ProcessGroupNCCL's watchdog ends a timed-out process with SIGABRT, `taking the
            # entire process down`: the shell's `Aborted (core dumped)` after it is that abort)
            continue
        out.append(e)
    return out


# A shared service's failure whose own detail names a cause on the node (pyxis printing
# enroot's log: its runtime directory refused): the nodes' configuration, not the service.
LOCAL_DETAILS = frozenset({"enroot_runtime_dir_denied"})


def _shared_service(
    a: Analysis, node_events: list[Event], primaries: list[Event]
) -> Verdict | None:
    """A shared service (a file system, a registry) failing as seen from two or more of the
    job's nodes: the service, not the node that happened to log first, so no culprit and a
    retry once it is back (attribution-labels.md tie-breaker 5). Catalogue entries say which
    signatures are about a shared service (`scope: shared`). Only when the job's own output
    shows nothing of a known other cause."""
    if any(e.category not in (Category.SYSTEM_SOFTWARE, Category.UNKNOWN) for e in primaries):
        return None
    if any(e.match.id in LOCAL_DETAILS for e in a.events):
        return None  # (the service's failure detail names a cause on the node itself)
    by_id: dict[str, dict[str, Event]] = {}
    for e in node_events:
        if e.node is None or e.match.id not in a.registry:
            continue
        if a.registry.get(e.match.id).scope != "shared":
            continue
        by_id.setdefault(e.match.id, {}).setdefault(e.node, e)
    for mid, per_node in by_id.items():
        if len(per_node) >= 2:
            first = min(per_node.values(), key=lambda e: (e.when is None, e.when, e.order))
            nodes = ", ".join(sorted(per_node))
            return Verdict(
                Category.SYSTEM_SOFTWARE, f"shared|{mid}",
                f"{mid} on {nodes}: a shared service failed for several nodes at once, no "
                "node to exclude", 0.7,
                evidence=[first.line, *[e.line for e in per_node.values()][:6]],
                # Nothing failed in the job's own output: it waited on the service.
                kind=None if primaries else AnomalyKind.HANG,
            )  # fmt: skip
    return None


def _watchdog_aborts(a: Analysis, elastic: list[ElasticFailure]) -> bool:
    """Every first observed failure is a SIGABRT, and ranks had reported collective timeouts
    first: ProcessGroupNCCL's watchdog aborts the process after its timeout (c10d
    `TORCH_NCCL_ASYNC_ERROR_HANDLING`), so the signal is the hang's consequence."""
    if any(f.exitcode != -6 for f in elastic):
        return False
    return any(e.cascade and e.serious and e.match.kind == AnomalyKind.HANG for e in a.events)


def watchdog_abort(a: Analysis, x: TaskExit) -> bool:
    """srun's `Aborted` for a task after ranks reported collective timeouts: ProcessGroupNCCL's
    watchdog ending the timed-out process with SIGABRT (the hang's consequence, as in
    `_primary_candidates`), not a native crash of the node's software."""
    if not x.what.startswith("Aborted"):
        return False
    waited = min(
        (e.order for e in a.events if e.cascade and e.match.kind == AnomalyKind.HANG), default=None
    )
    return waited is not None and x.order > waited


def _checked(a: Analysis, node: str) -> bool:
    """The bundle holds this node's kernel-side logs or diagnostics (not only slurmd's)."""
    kernel = ("dmesg_", "journal_", "syslog_", "console_", "sel_", "node_")
    return any(
        a.topo.hosts.canonical(name) == node and any(e.source.startswith(kernel) for e in lines)
        for name, lines in a.node_logs.items()
    )


def _backed(a: Analysis, node: str) -> bool:
    """Some node-side evidence says something is wrong with this node."""
    if node in a.facts.failed_nodes or any(f.host == node for f in a.metric_findings):
        return True
    if (obs := a.facts.nodes.get(node)) is not None and node_failed(obs):
        return True
    return any(e.node == node and e.serious for e in a.node_events)


_OTHER_PROCESS = re.compile(r"\bProcess \d+ has (?P<gib>\d+(?:\.\d+)?) GiB memory in use")


def _held_by_other(message: str) -> str | None:
    """PyTorch's OOM message names other processes on the GPU and what they hold: one holding
    a gigabyte or more is not this job's doing."""
    for m in _OTHER_PROCESS.finditer(message):
        if float(m["gib"]) >= 1.0:
            return "gpu"
    return None


# The NCCL setting each network-configuration error is about (NCCL environment variables
# documentation: NCCL_SOCKET_IFNAME selects the bootstrap interface, NCCL_IB_HCA the HCAs).
_GOVERNING_SETTING = {
    "nccl_no_socket_interface": "NCCL_SOCKET_IFNAME",
    "nccl_ib_no_device": "NCCL_IB_HCA",
    "nccl_net_not_found": "NCCL_NET",
}


# An operator's note saying where a setting comes from (`# job script (user-owned) contains:
# export NCCL_SOCKET_IFNAME=eth2`): the job's own script, or the site's (task prolog, nccl.conf,
# the image) (attribution-labels.md: a `#` line states a fact; tie-breaker 6 on ownership).
_JOBS_OWN = re.compile(r"(?i)\b(?:job|sbatch|batch|submission|user'?s?) ?script\b|\buser-owned\b")
_SITES_OWN = re.compile(r"(?i)\b(?:site|prolog|epilog|nccl\.conf|/etc/|image|module|admin)")


def _noted_as_the_jobs(text: str, name: str) -> bool:
    """A `#` note whose clause naming `name=` says the job's script sets it (and not the site)."""
    if not text.lstrip().startswith("#") or f"{name}=" not in text:
        return False
    clause = next((c for c in re.split(r"[;.]\s", text) if f"{name}=" in c), "")
    said = clause[: clause.find(f"{name}=")]
    return bool(_JOBS_OWN.search(said)) and not _SITES_OWN.search(said)


def noted_as_the_jobs(lines: list[LogLine], name: str) -> LogLine | None:
    """The `#` note saying the job's script sets `name`: one line that says so itself, or a
    quoted line (`#   export NAME=...`) in a block of notes introduced as the job's script
    (`# from the user's job script:`)."""
    # (the quoted line may set several: `#   NCCL_DEBUG=INFO NCCL_IB_DISABLE=1 ...`)
    quoted = re.compile(rf"^#\s*(?:export\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*{name}=")
    script = False
    for entry in lines:
        text = entry.text.lstrip()
        if not text.startswith("#"):
            script = False
            continue
        if _noted_as_the_jobs(text, name):
            return entry
        if _JOBS_OWN.search(text) and not _SITES_OWN.search(text) and f"{name}=" not in text:
            script = True
        elif script and quoted.match(text):
            return entry
    return None


def _set_by_job(
    a: Analysis, first: Event, summary: str, ranks: list[int], evidence: list[LogLine]
) -> Verdict | None:
    """The job script's own trace (`+ export NCCL_SOCKET_IFNAME=eth2`, bash -x) sets the
    setting this error is about: the job owns it, an application failure (attribution-labels
    tie-breaker 6) that a retry cannot fix. The setting may be named by the detail NCCL prints
    under a generic `DistBackendError` (`Last error: ncclSocketInit: ...`) rather than by the
    first line, so the job's other root lines are asked too."""
    if first.category != Category.SYSTEM_SOFTWARE:
        return None
    details = (e for e in a.events if e.root and e.origin == "job")
    about = next((e for e in (first, *details) if e.match.id in _GOVERNING_SETTING), None)
    if about is None:
        return None
    name = _GOVERNING_SETTING[about.match.id]
    # (bash -x's `+ export NAME=...` or an echoed `export`; a bare `NAME=...` is an env dump)
    traced = re.compile(rf"^(?:\++ ?(?:export )?|export ){name}=")
    owned = next((e for e in a.header + a.lines[:200] if traced.match(e.text)), None)
    if owned is None:
        owned = noted_as_the_jobs(a.header, name)
    if owned is None:
        return None
    return Verdict(
        Category.APPLICATION,
        first.key,
        f"{summary}: {name} set by the job script",
        0.85,
        ranks=ranks,
        evidence=[owned, *evidence],
    )


def said_everywhere(
    a: Analysis, first: Event, same: list[Event], primaries: list[Event], victims: set[str]
) -> bool:
    """Every process (or every node) of the job printed the first error, and no other kind
    of failure shows: the same fault everywhere (attribution-labels.md tie-breakers 3 and 6)."""
    actors = {e.actor for e in same if e.actor is not None}
    others = {e.actor for e in primaries if e.actor is not None and e.key != first.key}
    world = a.topo.world_size() or len(a.actors())
    everywhere = (
        len(actors) >= 2
        and not victims
        and not (others - actors)
        and (len(actors) >= world or (world >= 3 and len(actors) >= world - 1))
    )
    ranks = {int(x[1:]) for x in actors if x.startswith("r")}
    if everywhere and ranks and len(ranks) == len(actors) and _ranks_outnumber_tasks(a):
        # Ranks counted against srun's tasks (several ranks per task, how many unknown) say
        # nothing; srun terminating some tasks while the others exited with their own error
        # says the error was not everybody's.
        everywhere = not any(x.status == "terminated" for x in a.scan.exit_order)
    if len(actors) >= 2 and all(x.startswith("h") for x in actors):
        # Host prefixes only (pdsh, `srun --label` off with a host tag): several ranks share
        # one actor, so "everywhere" means every node of the job said it.
        known = set(a.node_list) or {
            n for h in a.topo.hosts_seen if (n := a.topo.hosts.canonical(h))
        }
        covered = {a.node_of_actor(x) for x in actors}
        everywhere = not victims and not (others - actors) and covered >= known
    if not actors and world >= 2:
        # No labels or rank prefixes: the same error printed once per process, by every one.
        unlabeled = [e for e in same if e.actor is None and e.origin == "job"]
        printed = len({e.line.line_no for e in unlabeled})
        everywhere = printed >= world and not others
        if not everywhere and printed >= 2 and not others and not victims:
            # Printed fewer times than there are processes (launchers keep one rank's
            # output per node, an excerpt), but srun says every task of the job exited with
            # an error code of its own, none of them terminated after another's failure.
            exits = a.scan.exit_order
            tasks = {x.task for x in exits if x.status == "exit" and x.code}
            everywhere = (
                bool(exits)
                and all(x.status == "exit" and x.code for x in exits)
                and (len(tasks) >= world)
            )
    return everywhere or _every_node_said(a, first, same, primaries, victims)


def _ranks_outnumber_tasks(a: Analysis) -> bool:
    topo = a.topo
    return (
        topo.world is None
        and not topo.rank_is_task
        and bool(topo.tasks_seen)
        and bool(topo.ranks_seen)
        and max(topo.ranks_seen) >= len(topo.tasks_seen)
    )


def _every_node_said(
    a: Analysis, first: Event, same: list[Event], primaries: list[Event], victims: set[str]
) -> bool:
    """The error's own lines name their hosts (NCCL's `host:pid:tid [dev]` prefix) and cover
    every node of the job, and whatever else failed is the same kind of fault (torch's generic
    `DistBackendError` over NCCL's own warning)."""
    if victims or any(e.category != first.category for e in primaries):
        return False
    known = set(a.job_nodes())
    covered = {n for e in same if (n := event_node(a, e)) is not None}
    return len(known) >= 2 and covered >= known


def _rank(e: Event) -> int | None:
    return e.rank if e.rank is not None else e.task


# slurmstepd's kill line: `*** JOB 3310421 ON gpu-m21 CANCELLED AT 2025-08-08T12:56:21 DUE TO
# PREEMPTION ***` (time limit, preemption, cancel alike).
_CANCELLED_AT = re.compile(r"\bCANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\b")


def after_the_kill(a: Analysis, e: Event) -> bool:
    """A node event logged after Slurm began killing the job is the kill's doing (its GPU
    contexts torn down mid-kernel log Xid 43), not a cause of the job's end."""
    if a.kill_order is None or e.when is None:
        return False
    m = _CANCELLED_AT.search(a.lines[a.kill_order].text)
    if m is None:
        return False
    try:
        return e.when.replace(tzinfo=None) > datetime.fromisoformat(m.group(1))
    except ValueError:
        return False


def every_rank_waited(a: Analysis) -> bool:
    """Every rank of the job reported its collective timing out: none was silent, so a task
    ending first without a word is one of the waiters (tie-breaker 2 needs a silent one)."""
    waited = {
        r for e in a.events if e.match.kind == AnomalyKind.HANG
        and (r := e.rank if e.rank is not None else _said_rank(e.message)) is not None
    }  # fmt: skip
    nodes = max(len(a.node_list), 1)
    if not waited or waited != set(range(max(waited) + 1)) or len(waited) % nodes:
        return False  # (a rank missing, or a world the nodes cannot hold evenly: not all)
    return len(waited) >= max(a.topo.world_size() or 0, 2 * nodes)


def _said_rank(message: str) -> int | None:
    m = _RANK_IN_MESSAGE.search(message)
    return int(m.group(1)) if m is not None else None


# ProcessGroupNCCL's own `[Rank 14] Watchdog caught collective operation timeout` (no prefix).
_RANK_IN_MESSAGE = re.compile(r"\[Rank (\d{1,7})\]")


# What a node file holds when the node was checked and its kernel had nothing to say
# (attribution-labels.md: "(no kernel messages in the job window)").
_NOTHING_LOGGED = re.compile(r"^\s*\(no kernel messages\b[^)]*\)\s*$")
_KERNEL_FILES = ("dmesg_", "journal_", "syslog_", "console_")


def quiet_node(a: Analysis, node: str) -> bool:
    """The bundle holds this node's kernel log and it says nothing of this job's window but
    an operator's notes or other jobs' OOM kills (their cgroups name other jobs)."""
    # (A host's files come as one list: its other files, a DCGM diagnostic say, are not its
    # kernel's.)
    kernel = [
        e for name, lines in a.node_logs.items() if a.topo.hosts.canonical(name) == node
        for e in lines if e.source.startswith(_KERNEL_FILES)
    ]  # fmt: skip
    if not kernel:
        return False
    job_id = a.job.job_id if a.job is not None else None
    others = [b for b in oom_blocks(a.node_logs) if b.of_another_job(job_id)]
    return all(
        not e.text.strip() or e.text.lstrip().startswith("#") or _NOTHING_LOGGED.match(e.text)
        or any(b.holds(e) for b in others)
        for e in kernel
    )  # fmt: skip
