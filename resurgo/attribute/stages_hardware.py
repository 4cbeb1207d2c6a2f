"""Attribution stages that blame a node's hardware.

3. node failure: a node of the job DOWN/not responding, `NODE FAILURE`, `Node failure on` →
   `hardware_host` (or the node's more specific hardware fault) naming that node;
4. hardware evidence: GPU/network/host errors in the job log (attributed to a node through the
   rank→node map), in a node's kernel log, in its metrics or in a hardware drain reason → that
   category, naming the node. A transport error naming an unreachable peer blames the peer
   when several reporters agree; the same ambiguous symptom on every node blames none.

(Numbers are the stages' places in `rules.analyse`.)
"""

from __future__ import annotations

import itertools
import re

from resurgo.attribute import node_removals as removals
from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.events import Event
from resurgo.attribute.fault_order import in_time_order, stuck_before_node_loss
from resurgo.attribute.metrics import Finding
from resurgo.attribute.peer_ends import common_end, numbered_owners
from resurgo.attribute.rerun_checks import rerun_suspects
from resurgo.attribute.scheduler import node_failed
from resurgo.attribute.stages_common import (
    _exit_lines,
    _peer_node,
    _primary_candidates,
    _shared_outage,
)
from resurgo.attribute.topology import expand_nodes
from resurgo.contracts import AnomalyKind, Category, LogLine

# Job-log "hardware" symptoms that software can produce too: on every node at once they are
# not a node's fault.
AMBIGUOUS_HARDWARE = frozenset(
    {"cuda_launch_failure", "nccl_system_error", "nccl_ib_completion_error", "ib_retry_exceeded"}
)


def _node_failure(a: Analysis, outcome: str | None) -> Verdict | None:
    failed: dict[str, LogLine | None] = {}
    for name, node in a.facts.nodes.items():
        if a.in_job(name) and node_failed(node):
            failed[name] = _node_record_line(a, name)
    for name, line in a.facts.failed_nodes.items():
        canonical = a.topo.hosts.canonical(name)
        if canonical and a.in_job(canonical):
            failed.setdefault(canonical, line)
    for e in a.events:
        if e.match.id == "srun_node_failure":
            for name in expand_nodes(e.match.groups.get("node", "")):
                canonical = a.topo.hosts.canonical(name)
                if canonical and a.in_job(canonical):
                    failed.setdefault(canonical, e.line)
    node_fail = outcome == "node_fail"
    said_by_srun = any(e.match.id == "srun_node_failure" for e in a.events)
    if not failed and not node_fail:
        return None
    if not failed and len(a.node_list) <= 1:
        # Nobody else to blame: the node the notice names (slurmctld lost contact with it).
        for e in a.events:
            if e.match.id == "slurm_cancelled_node_failure":
                reported = a.topo.hosts.canonical(e.match.groups.get("node"))
                if reported and (not a.node_list or a.node_list == [reported]):
                    failed[reported] = e.line
    if not failed and node_fail:
        # Slurm says a node failed but not which: the job's node whose own kernel logged a
        # fatal hardware fault (a machine-check panic, a fatal Xid) in the job's window is it.
        fatal = {
            e.node: e.line for e in _hardware_events(a)
            if e.node and a.in_job(e.node) and e.root and e.match.severity == "fatal"
        }  # fmt: skip
        # (else the nodes Slurm's own reasons say it lost, or the job's only node)
        failed.update(fatal if len(fatal) == 1 else dict.fromkeys(removals.lost_by_slurm(a)))
    # A power-saved (cloud) node the controller woke for the job and that never came up is
    # powered down again and replaced by a fresh instance: nothing of it to leave out.
    never_up = {n for n in failed if removals.not_resumed(a, n)}
    culprits = sorted(set(failed) - never_up)
    # Known only from Slurm (NODE_FAIL, `Not responding`, BOOT_FAIL): a scheduler event whose
    # node is still excluded (attribution-labels.md); node evidence below names the hardware.
    category = Category.SCHEDULER
    evidence = [line for line in failed.values() if line is not None]
    # (Transport errors towards a node Slurm lost are what its death looks like from its peers,
    # not a cause: only the node's own unambiguous faults name the hardware.)
    specific = [
        e for e in _hardware_events(a)
        if e.node in failed and (e.origin == "node" or e.match.id not in AMBIGUOUS_HARDWARE)
    ]  # fmt: skip
    if not specific and (taken := removals.set_down_by_operator(a, set(culprits))) is not None:
        reason, lines = taken
        return Verdict(
            Category.SCHEDULER, "node_failure|operator", f"an operator set "
            f"{', '.join(culprits)} DOWN ({reason[:80]}): an administrative end, no node fault",
            0.8, evidence=lines[:4], kind=AnomalyKind.CRASH, outcome="node_fail",
        )  # fmt: skip
    if specific:
        category = specific[0].category
        evidence = [e.line for e in specific] + evidence
    elif software := [
        e for e in [*a.events, *a.node_events]
        if e.root and e.serious and e.category == Category.SYSTEM_SOFTWARE
        and _named_node(a, e) in failed
    ]:  # fmt: skip
        # Slurm lost the node because its own software broke (munge credentials rejected by
        # a clock gone wrong, slurmd): the node's software, still excluded.
        category = Category.SYSTEM_SOFTWARE
        evidence = [e.line for e in software[:3]] + evidence
    evidence += [e.line for e in a.events if e.match.id.startswith("slurm_cancelled_node")]
    where = ", ".join(culprits) or "an unidentified node"
    if _shared_outage(specific, culprits) or (not specific and removals.lost_together(a, culprits)):
        return Verdict(
            category, "node_failure|shared", f"{where} failed at the same moment with the same "
            "fault: a shared cause (power, switch), no node to exclude", 0.7,
            evidence=evidence, kind=AnomalyKind.CRASH, outcome="node_fail",
        )  # fmt: skip
    return Verdict(
        category, "node_failure", f"node failure: {where} failed or stopped responding",
        0.9 if culprits else 0.7, culprits=culprits, evidence=evidence,
        # (Slurm's kill alone is a crash; a hardware fault that left the node silent while its
        # peers waited is a hang, unless the node's kernel died of it.)
        kind=AnomalyKind.HANG
        if specific and stuck_before_node_loss(a, set(culprits))
        else AnomalyKind.CRASH,
        # (srun's `Node failure on` ends the step whatever else the output shows.)
        outcome="node_fail" if node_fail or not a.running or said_by_srun else None,
    )  # fmt: skip


def _named_node(a: Analysis, e: Event) -> str | None:
    """The node an event happened on, or the node its message names (`Task launch for
    StepId=5.0 failed on node cn131`)."""
    return event_node(a, e) or a.topo.hosts.canonical(e.match.groups.get("node"))


def _node_record_line(a: Analysis, node: str) -> LogLine | None:
    for entry in a.facts.lines:
        if entry.text.lstrip().startswith(f"NodeName={node} ") or (
            f"NodeName={node}" in entry.text and "State=" in entry.text
        ):
            return entry
    for entry in a.facts.lines:
        if re.search(rf"\b{re.escape(node)}\b", entry.text) and re.search(
            r"(?i)not responding|DOWN", entry.text
        ):
            return entry
    return None


def _hardware_events(a: Analysis) -> list[Event]:
    """Serious hardware root events attributable to one of the job's nodes."""
    victims = a.victims()
    primaries = _primary_candidates(a, victims)
    first_primary = min((p.order for p in primaries if not p.hardware), default=None)
    out: list[Event] = []
    for e in a.events:
        if not (e.root and e.hardware and e.serious):
            continue
        if a.kill_order is not None and e.order > a.kill_order:
            # Slurm had begun killing the job (preemption, time limit, cancel): ranks dying
            # in a different order flush each other's queue pairs (IBV_WC_WR_FLUSH_ERR) and
            # reset their sockets; teardown noise, not a fault.
            continue
        if e.category == Category.HARDWARE_NETWORK and (
            e.actor in victims or (first_primary is not None and first_primary < e.order)
        ):
            continue  # a survivor's link errors after its peer died are a consequence
        out.append(e)
    out += [e for e in a.node_events if e.root and e.hardware and e.serious and a.in_job(e.node)]
    return out


def _drain_findings(a: Analysis) -> list[Finding]:
    """Nodes of the job an operator or health check drained for a hardware reason."""
    reasons: dict[str, tuple[str, LogLine | None]] = {}
    for name, record in a.facts.nodes.items():
        if record.reason:
            reasons[name] = (record.reason, _node_record_line(a, name))
    for r in a.facts.reasons:
        reasons.setdefault(r.node, (r.reason, None))
    out: list[Finding] = []
    for name, (reason, line) in reasons.items():
        node = a.topo.hosts.canonical(name)
        if node is None or not a.in_job(node) or reason.lower().startswith("resurgo"):
            continue
        category = removals.hardware_reason(reason)
        if category is None:
            continue
        where = line or next(
            (e for e in a.facts.lines if name in e.text and reason[:20] in e.text), None
        )
        if where is not None:
            out.append(Finding(node, category, "fatal", f"drained: {reason}", where))
    return out


def _hardware(a: Analysis) -> Verdict | None:
    events = _hardware_events(a)
    fatal_metrics = [f for f in a.metric_findings if f.severity == "fatal" and a.in_job(f.host)]
    fatal_metrics += _drain_findings(a)
    if not events and not fatal_metrics:
        return None
    if not fatal_metrics and _software_behind_transport(a, events):
        return None
    by_node: dict[str, list[Event]] = {}
    unplaced: list[Event] = []
    blamed = _blamed_peers(a, events) | rerun_suspects(a, events)
    for e in events:
        node = e.node
        if node is None and e.actor is not None:
            node = a.node_of_actor(e.actor)
        node = blamed.get(id(e), node)
        if node is None:
            unplaced.append(e)
        else:
            by_node.setdefault(node, []).append(e)
    metric_nodes: dict[str, list[Finding]] = {}
    for f in fatal_metrics:
        metric_nodes.setdefault(f.host, []).append(f)
    if unplaced and not by_node:
        node = _sole_failing_node(a)
        if node is not None:
            by_node[node] = unplaced
            unplaced = []
    corroborated = {e.node for e in events if e.origin == "node"} | set(metric_nodes)
    nodes = sorted(set(by_node) | set(metric_nodes))
    if corroborated:
        # Where a host's own logs show the fault, a peer's ambiguous symptom (retries exceeded
        # talking to it) does not make the peer a culprit too.
        nodes = [
            n for n in nodes
            if n in corroborated
            or any(e.match.id not in AMBIGUOUS_HARDWARE for e in by_node.get(n, []))
        ]  # fmt: skip
    ordered = in_time_order(events)  # (the earliest node fault in time, whichever file)
    placed = [e for e in ordered if event_node(a, e) in nodes]
    ordered = placed + [e for e in ordered if e not in placed] if placed else ordered
    first_cat = ordered[0].category if ordered else fatal_metrics[0].category
    head = ordered[0] if ordered else None
    confidence = 0.95 if corroborated else 0.9
    everywhere = len(a.node_list) >= 2 and set(nodes) >= set(a.node_list)
    ambiguous = all(e.match.id in AMBIGUOUS_HARDWARE for e in events) and not fatal_metrics
    if (
        everywhere
        and not corroborated
        and ambiguous
        and (first_cat != Category.HARDWARE_NETWORK or len(a.node_list) >= 3)
    ):
        # The same "hardware" error on every node at once is the fabric or the software.
        nodes, confidence = [], 0.6
    shared = _shared_outage(events, nodes)
    if shared:
        # Several nodes' own logs show the same fault at the same second: a switch or a
        # power feed they share, not each of them.
        nodes, confidence = [], 0.6
    if not nodes:
        confidence = min(confidence, 0.7)
    gpus: list[str] = []
    for node in nodes:
        for e in by_node.get(node, []):
            pci = e.match.groups.get("pci")
            if pci:
                gpus.append(f"{node}:{_bus_id(pci)}")
        for f in metric_nodes.get(node, []):
            if f.gpu:
                gpus.append(f"{node}:{f.gpu}")
    what = head.match.id if head is not None else fatal_metrics[0].what
    if head is not None and head.match.groups.get("xid"):
        what = f"Xid {head.match.groups['xid']}"
    key = head.key if head is not None else f"metric|{fatal_metrics[0].what}"
    evidence = [e.line for e in ordered] + [f.line for f in fatal_metrics]
    evidence += _exit_lines(a, nodes)
    ranks = sorted({e.rank if e.rank is not None else e.task for e in events
                    if e.node in nodes and (e.rank is not None or e.task is not None)}
                   )  # type: ignore[type-var]  # fmt: skip
    return Verdict(
        first_cat, key, f"{what} on {', '.join(nodes) or 'an unidentified node'}", confidence,
        culprits=nodes, ranks=[r for r in ranks if r is not None], gpus=sorted(set(gpus)),
        evidence=evidence,
        kind=AnomalyKind.HANG
        if _silent_until_killed(a)
        or (first_cat == Category.HARDWARE_NETWORK and _waited_out(a))
        else None,
    )  # fmt: skip


# Kills that end a job however stuck it was (attribution-labels.md: a time-limit kill or a
# cancel long after the last progress line is a hang); a preemption ends a running job.
_STUCK_KILLS = frozenset({"slurm_cancelled_time_limit", "slurm_job_cancelled"})


def _silent_until_killed(a: Analysis) -> bool:
    """The job's output shows no error and no process ending before Slurm killed it for its
    time limit (or a cancel): the node's fault left the job stuck, a hang."""
    cut = a.kill_order
    if cut is None:
        return False
    if not any(e.order == cut and e.match.id in _STUCK_KILLS for e in a.events):
        return False
    if any(
        e.origin == "job" and e.serious and (e.root or e.cascade) and e.order < cut
        for e in a.events
    ):
        return False
    return not any(x.order < cut and x.status != "terminated" for x in a.scan.exit_order)


def _software_behind_transport(a: Analysis, events: list[Event]) -> bool:
    """The only "hardware" is the job's transport errors (retries exhausted, which a peer whose
    address or GID changed produces as well as a dead link), while a node's own files show its
    network software failing (a DHCP lease replacing the RoCE address): the node's software,
    left to the software stages (attribution-labels.md tie-breaker 1: the first node-level
    fault decides)."""
    if not events or any(e.origin != "job" or e.match.id not in AMBIGUOUS_HARDWARE for e in events):
        return False
    return any(
        e.root and e.serious and e.category == Category.SYSTEM_SOFTWARE and a.in_job(e.node)
        and (e.match.id not in a.registry or a.registry.get(e.match.id).scope == "node")
        for e in a.node_events
    )  # fmt: skip


def _waited_out(a: Analysis) -> bool:
    """The job's output shows only network transport errors (NCCL's `Got completion from peer`
    warning) and then every process's collective timing out: no process died of the error, the
    job stopped making progress and the watchdog ended it (attribution-labels.md: a hang)."""
    said = [e for e in a.events if e.origin == "job" and e.serious and (e.root or e.cascade)]
    waits = [e for e in said if e.match.kind == AnomalyKind.HANG]
    if not waits or not any(e.category == Category.HARDWARE_NETWORK for e in said):
        return False
    first_wait = min(e.order for e in waits)
    if any(x.order < first_wait and x.status != "terminated" for x in a.scan.exit_order):
        return False  # a process ended before anyone waited: it died, the job did not hang
    return all(
        e.match.kind == AnomalyKind.HANG or e.category == Category.HARDWARE_NETWORK for e in said
    )


def _blamed_peers(a: Analysis, events: list[Event]) -> dict[int, str]:
    """Network errors that name the peer they could not reach, blamed on that peer.

    A link that fails shows up as transport errors on every host talking to it. When hosts on
    two or more other nodes name the same peer, or the peer's own logs show a network fault,
    the peer is the culprit and the reporters are not.
    """
    named: dict[str, set[str]] = {}
    naming: dict[int, str] = {}
    for e in events:
        if e.category != Category.HARDWARE_NETWORK or e.origin != "job":
            continue
        peer = _peer_node(a, e)
        reporter = event_node(a, e)
        if peer is None or reporter is None or peer == reporter:
            continue
        named.setdefault(peer, set()).add(reporter)
        naming[id(e)] = peer
    if (end := _common_end(a, events)) is not None:
        return end
    if not named:
        return {}
    self_reported = {
        event_node(a, e)
        for e in events
        if e.category == Category.HARDWARE_NETWORK and id(e) not in naming
    }
    blamed = {p for p, reporters in named.items() if len(reporters) >= 2 or p in self_reported}
    return {i: peer for i, peer in naming.items() if peer in blamed}


_ADDRESS = re.compile(r"[<\]].*$")


def _common_end(a: Analysis, events: list[Event]) -> dict[int, str] | None:
    """Every network error blamed on the one node at the common end of the failing pairs
    (`peer_ends`), or None when there is no such node."""
    raw: list[tuple[Event, str, str]] = []  # (event, reporter, peer as named)
    for e in events:
        if e.category != Category.HARDWARE_NETWORK or e.origin != "job":
            continue
        reporter = event_node(a, e)
        address = _ADDRESS.sub("", e.match.groups.get("peer", "")).strip("[")
        if reporter is not None and address:
            raw.append((e, reporter, address))
    if len(raw) < 2:
        return None
    known = {addr: n for _e, _r, addr in raw if (n := _known_node(a, addr)) is not None}
    unknown = {addr for _e, _r, addr in raw if addr not in known}
    if unknown:
        reporters: dict[str, set[str]] = {}
        for _e, reporter, addr in raw:
            reporters.setdefault(addr, set()).add(reporter)
        hosts = set(a.node_list) or (
            set(a.topo.task_node.values()) | {x.node for x in a.scan.exit_order if x.node}
        )
        numbered = numbered_owners(unknown, hosts, reporters)
        if not numbered:
            return None
        known.update(numbered)
    end = common_end([(reporter, known[addr]) for _e, reporter, addr in raw])
    if end is None:
        return None
    return {id(e): end for e, _r, _a in raw}


def _known_node(a: Analysis, address: str) -> str | None:
    """The job's node an address names, where the output or Slurm says so (not a bare IP
    accepted as itself for want of a node list)."""
    node = a.topo.hosts.canonical(address)
    if node is None or (node == address and re.fullmatch(r"[\d.]+", address)):
        return None
    return node if a.in_job(node) else None


def _bus_id(pci: str) -> str:
    """`0000:3B:00.0` and `0000:3b:00` name the same GPU: lower case, no PCI function."""
    return re.sub(r"\.\d$", "", pci.lower())


def _sole_failing_node(a: Analysis) -> str | None:
    if len(a.node_list) == 1:
        return a.node_list[0]
    failing = {x.node for x in a.scan.exit_order if x.status != "terminated" and x.node}
    return next(iter(failing)) if len(failing) == 1 else None


# NVSentinel's health-events analyzer: Xid 13/31/43 bursts (15 s for 13, 3 minutes for 31)
# count once; the same Xid again on the same GPU in a later burst is the GPU, on different
# GPUs the workload (docs/configuration/health-events-analyzer.md; failure taxonomy B.3).
XID_BURST_SECONDS = 180.0
_AMBIGUOUS_XID = "xid_application"


def _noted_before(a: Analysis, node: str, bus: str) -> bool:
    """An operator's note says an earlier attempt saw an Xid on this node's same GPU (`# attempt
    1 ...: blk-g-03 dmesg then showed Xid 13 on PCI:0000:ca:00`): with this attempt's Xid, the
    same physical GPU failed across restarts (attribution-labels.md tie-breaker 3)."""
    short = bus.split(":", 1)[1] if bus.count(":") >= 2 else bus  # `ca:00` without the domain
    for line in a.header:
        text = line.text.lstrip()
        if not (text.startswith("#") and "Xid" in text and node in text):
            continue
        # The GPU's PCI address, not a clock time that happens to read `01:00`.
        if re.search(rf"(?i)\bPCI:?\s*(?:[0-9a-f]{{4}}:)?{re.escape(short)}\b", text):
            return True
    return False


_XID_PID = re.compile(
    r"\bNVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+), pid=(?P<pid>\d+)"
)


def _earlier_pids(a: Analysis, node: str, bus: str, xid: str) -> set[str]:
    """The processes the same Xid hit on the same GPU anywhere in the node's own files, earlier
    runs' included (a `journalctl -k --since` the operator pasted): the event scan keeps only
    the job's window, the repeat is in the history."""
    pids: set[str] = set()
    for host, lines in a.node_logs.items():
        if a.topo.hosts.canonical(host) != node:
            continue
        for entry in lines:
            m = _XID_PID.search(entry.text) if "Xid" in entry.text else None
            if m is not None and m["xid"] == xid and _bus_id(m["pci"]) == bus:
                pids.add(m["pid"])
    return pids


def _repeating_gpu_exception(a: Analysis) -> Verdict | None:
    """Xid 13/31/43 on one GPU only, in two or more separate bursts (the job's restarts)."""
    gpus: dict[tuple[str, str], list[Event]] = {}
    for e in a.node_events:
        pci = e.match.groups.get("pci")
        if e.match.id != _AMBIGUOUS_XID or e.node is None or not pci or not a.in_job(e.node):
            continue
        gpus.setdefault((e.node, _bus_id(pci)), []).append(e)
    if len(gpus) != 1:
        return None
    (node, bus), events = next(iter(gpus.items()))
    times = sorted(e.when for e in events if e.when is not None)
    bursts = 1 if times else 0
    for before, after in itertools.pairwise(times):
        if (after - before).total_seconds() > XID_BURST_SECONDS:
            bursts += 1
    pids = {p.group(1) for e in events if (p := re.search(r"\bpid=(\d+)", e.line.text))}
    pids |= _earlier_pids(a, node, bus, events[0].match.groups.get("xid", ""))
    if bursts < 2 and len(pids) < 2 and not _noted_before(a, node, bus):
        return None
    return Verdict(
        Category.HARDWARE_GPU, f"xid_repeat|{events[0].match.groups.get('xid', '')}",
        f"Xid {events[0].match.groups.get('xid', '')} on the same GPU ({node}:{bus}) in "
        f"separate failures: the GPU, not the code", 0.85,
        culprits=[node], gpus=[f"{node}:{bus}"], evidence=[e.line for e in events[:4]],
    )  # fmt: skip
