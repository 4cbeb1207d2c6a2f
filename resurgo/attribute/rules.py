"""Rule-based attribution: why did the attempt fail, and which nodes are to blame.

Pure: it reads the attempt's log lines, Slurm facts, node-side logs and metrics, and returns an
`Attribution`. The stages, first match wins:

1. healthy: the job completed (exit 0) → kind/category `none`;
2. cancelled by its owner → `scheduler`, nothing to recover;
3. node failure: a node of the job DOWN/not responding, `NODE FAILURE`, `Node failure on` →
   `hardware_host` (or the node's more specific hardware fault) naming that node;
4. hardware evidence: GPU/network/host errors in the job log (attributed to a node through the
   rank→node map), in a node's kernel log or in its metrics → that category, naming the node;
5. the earliest root-candidate failure across ranks. A rank whose first error is a cascade
   (connection closed/reset by peer, collective timeouts, aborted communicators) is a victim and
   never the root cause, nor is anything it does afterwards. The same deterministic application
   error on every rank is the application's (no culprit, stop-grade confidence); an error on
   some ranks only is retried. A rank killed by a signal names its node (unless its node's
   kernel log shows the OOM killer: the application);
6. scheduler outcomes (time limit, preemption, an admin's cancel) when nothing failed before;
7. only cascades: the ranks that stayed silent while their peers timed out are suspects;
8. no failure in sight: a running job is a straggler (one rank much slower) or a hang.

Fingerprints depend on the category and the normalised root-cause message only (never on node
names, ranks or numbers), so the same root cause recurring on other nodes spends the same
budget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

from resurgo.attribute.analysis import (
    Analysis,
    Kind,
    Verdict,
    actor_node,
    event_node,
    fingerprint,
)
from resurgo.attribute.bundle import Bundle
from resurgo.attribute.liveness import running_fine
from resurgo.attribute.log_events import (
    DETERMINISTIC_APP,
    NODE_LOCAL_SYSTEM,
    Event,
    TaskExit,
    normalise,
)
from resurgo.attribute.metrics import Finding
from resurgo.attribute.scheduler import (
    node_failed,
    parse_scheduler,
)
from resurgo.attribute.stragglers import stragglers
from resurgo.attribute.topology import split_host_prefix
from resurgo.contracts import (
    HARDWARE_CATEGORIES,
    Anomaly,
    AnomalyKind,
    Attribution,
    Category,
    JobObservation,
    LogLine,
    NodeObservation,
)
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.detect.registry import Registry

MAX_EVIDENCE = 20
# Job-log "hardware" symptoms that software can produce too: on every node at once they are
# not a node's fault.
AMBIGUOUS_HARDWARE = frozenset(
    {"cuda_launch_failure", "nccl_system_error", "nccl_ib_completion_error", "ib_retry_exceeded"}
)
# A process's own native crash report: without a hardware fault on its host, it is the
# framework's or the node's software (failure taxonomy B.14).
NATIVE_CRASH = frozenset(
    {"segmentation_fault", "sigsegv_signal", "bus_error", "abort_signal", "python_fatal_signal"}
)
# Application errors that a retry (from the last checkpoint, elsewhere) may well get past.
NONDETERMINISTIC_APP = frozenset(
    {"loss_nan", "nonfinite_values", "cuda_oom", "host_oom_kill", "slurm_oom_kill"}
)
# A path the job names that is missing or forbidden: on one node a mount (retry elsewhere), on
# every rank of every node the job's own data or configuration (failure taxonomy B.8).
CONFIGURED_PATHS = frozenset({"file_not_found", "permission_denied"})
# Unknown-category roots about shared state (storage, checkpoints): no node to blame.
SHARED_UNKNOWN = frozenset(
    {"checkpoint_save_failed", "dcp_checkpoint_exception", "resume_load_failed", "python_exception"}
)
_TRANSIENT_EXCEPTION = re.compile(
    r"(?i)connect|timeout|timed ?out|network|http|ssl|socket|unavailable|temporar|resource|"
    r"busy|retry|oserror|ioerror|eoferror|interrupt|lock|quota|memory"
)
_SOFTWARE_REASON = re.compile(
    r"hostengine|daemon|service|not running|version|mount|filesystem|file system|munge|"
    r"slurmd|upgrade|package|check_(?:fs|ps|file)_"
)
_RANK_LIST = re.compile(r"\d+")
_NCCL_VERSION = re.compile(r"\bNCCL version (?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)")
_VERSION_PAIR = re.compile(r"\brank (?P<rank>\d+) version (?P<code>\d{4,6})\b")
# A program's environment missing a piece: the job's own, or one node's image.
ENVIRONMENT_IDS = frozenset({"shared_library_missing", "lmod_module_unknown"})
_ENVIRONMENT = re.compile(
    r"\b(?:ImportError|ModuleNotFoundError)\b|cannot open shared object file|"
    r"undefined symbol: |GLIBC_\d[\d.]* not found"
)
# How far below a generic wrapper exception its real cause may be printed (one traceback).
WRAPPED_CAUSE_LINES = 40


# ---------------------------------------------------------------------------- the stages
def _healthy(a: Analysis) -> Verdict | None:
    if not a.completed():
        return None
    slow = stragglers(a, timings_only=True)
    if slow is not None and slow.culprits:
        return slow  # it finished, but one node held everybody back
    done = a._completion()
    return Verdict(
        Category.NONE, "none", "job completed", 1.0,
        evidence=[done] if done is not None else [], kind="none",
    )  # fmt: skip


def _owner_cancel(a: Analysis, outcome: str | None) -> Verdict | None:
    if outcome != "owner_cancelled":
        return None
    lines = [e.line for e in a.events if e.match.id == "slurm_job_cancelled"][:3]
    return Verdict(
        Category.SCHEDULER, "owner_cancelled", "the job was cancelled by its owner", 0.95,
        evidence=lines, kind=AnomalyKind.CRASH, outcome=outcome,
    )  # fmt: skip


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
            for name in re.split(r"[,\s]+", e.match.groups.get("node", "")):
                canonical = a.topo.hosts.canonical(name)
                if canonical and a.in_job(canonical):
                    failed.setdefault(canonical, e.line)
    node_fail = outcome == "node_fail"
    if not failed and not node_fail:
        return None
    if not failed and len(a.node_list) <= 1:
        # Nobody else to blame: the node the notice names (slurmctld lost contact with it).
        for e in a.events:
            if e.match.id == "slurm_cancelled_node_failure":
                reported = a.topo.hosts.canonical(e.match.groups.get("node"))
                if reported and (not a.node_list or a.node_list == [reported]):
                    failed[reported] = e.line
    culprits = sorted(failed)
    category = Category.HARDWARE_HOST
    evidence = [line for line in failed.values() if line is not None]
    specific = [e for e in _hardware_events(a) if e.node in failed]
    if specific:
        category = specific[0].category
        evidence = [e.line for e in specific] + evidence
    evidence += [e.line for e in a.events if e.match.id.startswith("slurm_cancelled_node")]
    where = ", ".join(culprits) or "an unidentified node"
    return Verdict(
        category, "node_failure", f"node failure: {where} failed or stopped responding",
        0.9 if culprits else 0.7, culprits=culprits, evidence=evidence,
        kind=AnomalyKind.CRASH, outcome="node_fail" if node_fail or not a.running else None,
    )  # fmt: skip


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
        category = _hardware_reason(reason)
        if category is None:
            continue
        where = line or next(
            (e for e in a.facts.lines if name in e.text and reason[:20] in e.text), None
        )
        if where is not None:
            out.append(Finding(node, category, "fatal", f"drained: {reason}", where))
    return out


def _hardware_reason(reason: str) -> Category | None:
    text = reason.lower()
    if _SOFTWARE_REASON.search(text):
        return None  # a daemon, a mount, a package: the node's software (or an operator's)
    if re.search(r"\bxid\b|\becc\b|\bgpu|nvlink|nvswitch|fallen off|dcgm|row remap", text):
        return Category.HARDWARE_GPU
    if re.search(r"infiniband|\bib\b|\bhca\b|mlx\d|link (?:down|flap)|\bnic\b|port down", text):
        return Category.HARDWARE_NETWORK
    if re.search(
        r"machine check|\bmce\b|dimm|memory error|power supply|\bpsu\b|\bfan\b|thermal|"
        r"overheat|\bnvme\b|disk fail|hardware|hw error|\bbmc\b|\bnhc\b|health ?check",
        text,
    ):
        return Category.HARDWARE_HOST
    return None


def _hardware(a: Analysis) -> Verdict | None:
    events = _hardware_events(a)
    fatal_metrics = [f for f in a.metric_findings if f.severity == "fatal" and a.in_job(f.host)]
    fatal_metrics += _drain_findings(a)
    if not events and not fatal_metrics:
        return None
    by_node: dict[str, list[Event]] = {}
    unplaced: list[Event] = []
    blamed = _blamed_peers(a, events)
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
    ordered = sorted(events, key=lambda e: (e.origin != "job", e.order))
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
    )  # fmt: skip


def _peer_node(a: Analysis, e: Event) -> str | None:
    address = re.sub(r"[<:\]].*$", "", e.match.groups.get("peer", "")).strip("[")
    node = a.topo.hosts.canonical(address) if address else None
    return node if node is not None and a.in_job(node) else None


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
    if not named:
        return {}
    self_reported = {
        event_node(a, e)
        for e in events
        if e.category == Category.HARDWARE_NETWORK and id(e) not in naming
    }
    blamed = {p for p, reporters in named.items() if len(reporters) >= 2 or p in self_reported}
    return {i: peer for i, peer in naming.items() if peer in blamed}


def _bus_id(pci: str) -> str:
    """`0000:3B:00.0` and `0000:3b:00` name the same GPU: lower case, no PCI function."""
    return re.sub(r"\.\d$", "", pci.lower())


def _sole_failing_node(a: Analysis) -> str | None:
    if len(a.node_list) == 1:
        return a.node_list[0]
    failing = {x.node for x in a.scan.exit_order if x.status != "terminated" and x.node}
    return next(iter(failing)) if len(failing) == 1 else None


def _exit_lines(a: Analysis, nodes: Iterable[str]) -> list[LogLine]:
    wanted = set(nodes)
    return [x.line for x in a.scan.exit_order if x.node in wanted and x.status != "terminated"]


def _primary_candidates(a: Analysis, victims: set[str]) -> list[Event]:
    cut = a.kill_order
    out = []
    for e in a.events:
        if not (e.root and e.serious) or e.actor in victims:
            continue
        if cut is not None and e.order > cut:
            continue
        out.append(e)
    return out


def _root_failure(a: Analysis) -> Verdict | None:
    victims = a.victims()
    primaries = [e for e in _primary_candidates(a, victims) if not e.hardware]
    deaths = [
        x
        for x in a.scan.exit_order
        if x.status in ("signal", "killed", "oom") and x.actor not in victims
        and (a.kill_order is None or x.order < a.kill_order)
    ]  # fmt: skip
    node_app = [
        e for e in a.node_events
        if e.root and e.serious and e.category in (Category.APPLICATION, Category.SYSTEM_SOFTWARE)
        and a.in_job(e.node)
    ]  # fmt: skip
    if primaries:
        return _from_primaries(a, primaries, victims, deaths, node_app)
    if deaths:
        verdict = _from_death(a, deaths[0], node_app)
        world = a.topo.world_size() or len(a.actors())
        if world >= 2 and len({x.actor for x in deaths}) >= world:
            # Every process died the same way at once: not one node's doing.
            verdict.culprits = []
            verdict.summary = f"every task died: {deaths[0].what}"
        return verdict
    elastic = [f for f in a.scan.elastic if f.root]
    if elastic:
        # One agent per node prints its own "first observed failure": the earliest is the
        # job's (the others are their nodes' ranks aborting after it).
        f = min(elastic, key=lambda f: (f.when is None, f.when or datetime.min, f.order))
        node = f.node or (a.topo.node_of(None, f.rank) if f.rank is not None else None)
        explained = _explain_by_node(a, node, node_app)
        if explained is not None:
            return explained
        signal = f"signal {-f.exitcode}" if f.exitcode is not None and f.exitcode < 0 else (
            f"exit code {f.exitcode}")  # fmt: skip
        # SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE: a native crash; SIGKILL & co: cause unknown.
        native = f.exitcode in (-11, -6, -7, -4, -8)
        return Verdict(
            Category.SYSTEM_SOFTWARE if native else Category.UNKNOWN, f"elastic|{signal}",
            f"rank {f.rank} on {node or '?'} failed first ({signal})", 0.6,
            culprits=[node] if node else [],
            ranks=[f.rank] if f.rank is not None else [], evidence=[f.line],
        )  # fmt: skip
    # A task that exited without a word, where nothing else on its node spoke either (srun's
    # task numbers and the log's rank prefixes name the same processes differently).
    spoke = {e.actor for e in a.events} | {
        n for e in a.events if (n := event_node(a, e)) is not None
    }
    silent = [
        x for x in a.scan.exit_order
        if x.status == "exit" and x.code and not x.after_termination
        and x.actor not in spoke and x.node not in spoke
    ]  # fmt: skip
    if silent:
        x = silent[0]
        explained = _explain_by_node(a, x.node, node_app)
        if explained is not None:
            return explained
        local = [e for e in node_app if e.node == x.node and e.category == Category.SYSTEM_SOFTWARE]
        if local:
            # Its node's own logs say what broke there (a daemon, a mount, the kernel).
            return Verdict(
                Category.SYSTEM_SOFTWARE, local[0].key,
                f"{local[0].match.id} on {x.node}; task {x.task} exited with code {x.code}",
                0.7, culprits=[x.node] if x.node else [], ranks=[x.task],
                evidence=[local[0].line, x.line],
            )  # fmt: skip
        return Verdict(
            Category.UNKNOWN, f"exit|{x.code}", f"task {x.task} on {x.node} exited with code "
            f"{x.code} first, without an error message", 0.5,
            culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[x.line],
        )  # fmt: skip
    if node_app:
        e = node_app[0]
        return Verdict(
            e.category, e.key, f"{e.match.id} on {e.node}", 0.65,
            culprits=[e.node] if e.match.id in NODE_LOCAL_SYSTEM and e.node else [],
            evidence=[e.line],
        )  # fmt: skip
    return None


def _explain_by_node(a: Analysis, node: str | None, node_app: list[Event]) -> Verdict | None:
    """A rank that died without a word: did its node's kernel kill it (OOM)?"""
    for e in node_app:
        if e.node == node and e.category == Category.APPLICATION:
            return Verdict(
                Category.APPLICATION, e.key, f"{e.match.id} on {node}: the job ran out of "
                "host memory", 0.7, evidence=[e.line],
            )  # fmt: skip
    return None


def _from_death(a: Analysis, x: TaskExit, node_app: list[Event]) -> Verdict:
    explained = _explain_by_node(a, x.node, node_app)
    if explained is not None:
        explained.evidence.append(x.line)
        explained.ranks = [x.task]
        return explained
    if x.status == "oom":
        return Verdict(
            Category.APPLICATION, "oom|task", f"task {x.task} on {x.node} ran out of memory",
            0.7, ranks=[x.task], evidence=[x.line],
        )  # fmt: skip
    local = [e for e in node_app if e.node == x.node and e.match.id in NODE_LOCAL_SYSTEM]
    if local:
        e = local[0]
        return Verdict(
            Category.SYSTEM_SOFTWARE, e.key, f"{e.match.id} on {x.node}", 0.7,
            culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[e.line, x.line],
        )  # fmt: skip
    # A native crash (SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE) with no hardware fault on its host
    # is the framework's or the node's software; a bare SIGKILL says nothing about the cause.
    native = x.status == "signal"
    return Verdict(
        Category.SYSTEM_SOFTWARE if native else Category.UNKNOWN,
        f"signal|{normalise(x.what)}", f"task {x.task} on {x.node} died first: {x.what}",
        0.6, culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[x.line],
    )  # fmt: skip


def _from_primaries(
    a: Analysis,
    primaries: list[Event],
    victims: set[str],
    deaths: list[TaskExit],
    node_app: list[Event],
) -> Verdict:
    first = _specific_cause(min(primaries, key=lambda e: e.order), primaries)
    same = [e for e in primaries if e.key == first.key]
    actors = {e.actor for e in same if e.actor is not None}
    others = {e.actor for e in primaries if e.actor is not None and e.key != first.key}
    world = a.topo.world_size() or len(a.actors())
    everywhere = (
        len(actors) >= 2
        and not victims
        and not (others - actors)
        and (len(actors) >= world or (world >= 3 and len(actors) >= world - 1))
    )
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
        everywhere = len({e.line.line_no for e in unlabeled}) >= world and not others
    nodes = sorted({n for e in same if (n := event_node(a, e)) is not None})
    if not nodes and not everywhere and first.actor is None:
        # An unlabelled crash report: srun's verdict says whose process died of a signal.
        dead = {x.node for x in deaths if x.node} or {
            x.node for x in a.scan.exit_order
            if x.node and x.status == "exit" and x.code and x.actor not in victims
            and not x.after_termination
        }  # fmt: skip
        if len(dead) == 1:
            nodes = sorted(dead)
        elif first.category == Category.SYSTEM_SOFTWARE:
            # A node-local software failure printed without a label: the task srun saw end
            # first after it is the one that printed it (the rest ended waiting for it).
            after = [
                x for x in a.scan.exit_order
                if x.node and x.status != "terminated" and x.actor not in victims
                and not x.after_termination and x.order > first.order
            ]  # fmt: skip
            nodes = [after[0].node] if after and after[0].node else []
    ranks = sorted({r for e in same if (r := _rank(e)) is not None})
    evidence = [e.line for e in same] + [
        x.line for x in a.scan.exit_order if x.actor in actors and x.status != "terminated"
    ]
    evidence += [e.line for e in a.events if e.cascade][:3]  # fmt: skip
    category = first.category
    mid = first.match.id
    if everywhere:
        scope = "every rank"
    elif ranks:
        scope = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    else:
        scope = "one rank"
    summary = f"{first.message[:160]} ({scope})"
    if category == Category.APPLICATION and not everywhere:
        drifted = _drifted_node(a, first, primaries)
        if drifted is not None:
            evidence += [e.line for e in a.node_events if e.node == drifted]
            return Verdict(
                Category.SYSTEM_SOFTWARE, first.key,
                f"{summary}: only on {drifted}, where the other nodes got past it "
                "(the node's software image)", 0.7,
                culprits=[drifted], ranks=ranks, evidence=evidence,
            )  # fmt: skip
    if category == Category.APPLICATION:
        on_line = [e for e in a.events if e.line == first.line]
        spread = len({n for e in same if (n := event_node(a, e))}) >= 2
        deterministic = (
            mid in DETERMINISTIC_APP
            or (mid in CONFIGURED_PATHS and everywhere and spread)
            or (mid == "python_user_exception" and not _transient(first))
        ) and not any(e.match.id in NONDETERMINISTIC_APP or "nan" in e.match.tags for e in on_line)
        if everywhere:
            confidence = 0.95 if deterministic else 0.75
        else:
            confidence = 0.7 if deterministic else 0.6
        return Verdict(category, first.key, summary, confidence, ranks=ranks, evidence=evidence)
    if category == Category.SYSTEM_SOFTWARE:
        troubled = {
            e.node for e in a.node_events
            if e.root and e.category == Category.SYSTEM_SOFTWARE and e.node is not None
        }  # fmt: skip
        if mid == "nccl_version_mismatch" and (odd := _version_drift(a)):
            nodes = odd
            summary = f"NCCL version differs on {', '.join(odd)} ({summary})"
        node_local = mid in NODE_LOCAL_SYSTEM or (bool(nodes) and set(nodes) <= troubled)
        local = node_local and not everywhere and nodes and (
            len(a.node_list) < 2 or set(nodes) < set(a.node_list)
        )  # fmt: skip
        if local:
            evidence += [e.line for e in a.node_events if e.node in nodes and e.root]
        return Verdict(
            category, first.key, summary, 0.8 if local else 0.75,
            culprits=nodes if local else [], ranks=ranks, evidence=evidence,
        )  # fmt: skip
    # unknown root (segfault, abort, CUDA error of no known class, exception of no known type)
    if everywhere and mid == "python_exception":
        # The same exception, same message, from every rank: the job's code, data or config
        # (stop-grade), unless its type is about reaching something shared (a hub, a
        # tracker, a store) that may be back on the next try.
        return Verdict(Category.APPLICATION, first.key, summary,
                       0.75 if _transient(first) else 0.85, ranks=ranks,
                       evidence=evidence)  # fmt: skip
    if first.actor is not None:
        explained = _explain_by_node(a, actor_node(a, first.actor), node_app)
        if explained is not None:
            explained.evidence += evidence
            explained.ranks = ranks
            return explained
    named = mid not in SHARED_UNKNOWN and not everywhere
    category = Category.SYSTEM_SOFTWARE if mid in NATIVE_CRASH else Category.UNKNOWN
    return Verdict(
        category, first.key, summary, 0.6 if named else 0.5,
        culprits=nodes if named else [], ranks=ranks, evidence=evidence,
    )  # fmt: skip


def _transient(e: Event) -> bool:
    """An exception whose type is about reaching something shared (a hub, a tracker, a
    store, a file system) may pass on the next try, whatever rank raised it."""
    return bool(_TRANSIENT_EXCEPTION.search(e.message.split(":", 1)[0]))


def _version_drift(a: Analysis) -> list[str]:
    """Nodes running a different NCCL than most of the job, from each host's `NCCL version`
    line and NCCL's `Mismatched NCCL version detected : rank A version X rank B version Y`."""
    on: dict[int, set[str]] = {}
    for entry in a.lines:
        if "version" not in entry.text:
            continue
        host, text = split_host_prefix(entry.text, a.topo.host_prefixes)
        pre = strip_prefixes(text)
        nccl = parse_nccl_prefix(text)
        if m := _NCCL_VERSION.search(pre.body):
            node = a.topo.hosts.canonical(nccl.host if nccl else host) or a.topo.node_of(
                pre.task, pre.rank
            )
            code = int(m["major"]) * 10000 + int(m["minor"]) * 100 + int(m["patch"])
            if node is not None:
                on.setdefault(code, set()).add(node)
        for m in _VERSION_PAIR.finditer(pre.body):
            if (node := a.topo.node_of(None, int(m["rank"]))) is not None:
                on.setdefault(int(m["code"]), set()).add(node)
    if len(on) < 2:
        return []
    everyone = set().union(*on.values())
    common = max(on, key=lambda code: len(on[code]))
    drifted = everyone - on[common]
    return sorted(drifted) if len(drifted) * 2 < len(everyone) else []


def _environment_error(e: Event) -> bool:
    return e.match.id in ENVIRONMENT_IDS or bool(_ENVIRONMENT.search(e.message))


def _drifted_node(a: Analysis, first: Event, primaries: list[Event]) -> str | None:
    """The one node whose software environment is missing what the others' have.

    An import, shared-library or module error is the job's own environment when every node
    hits it; when it comes from one node's ranks only while ranks elsewhere ran on (their
    first sign is a cascade, or nothing), that node's image has drifted (taxonomy B.18).
    """
    if not _environment_error(first):
        return None
    failing = [e for e in primaries if _environment_error(e)]
    nodes = {event_node(a, e) for e in failing}
    if len(nodes) != 1 or None in nodes:
        return None
    node = next(iter(nodes))
    assert node is not None
    failed = {e.actor for e in failing}
    others = {x for x in a.actors() - failed if a.node_of_actor(x) != node}
    if not others or any(e.actor in others for e in primaries):
        return None
    return node


def _specific_cause(first: Event, primaries: list[Event]) -> Event:
    """The known cause a generic wrapper reports just after it (same rank).

    Wrappers print first and carry the real error below them: a DataLoader worker's `Caught
    OSError ... Original Traceback`, a DCP `CheckpointException` listing each rank's failure.
    """
    if first.category != Category.UNKNOWN or first.actor is None:
        return first
    for e in sorted(primaries, key=lambda e: e.order):
        if e.order <= first.order or e.actor != first.actor:
            continue
        if e.order - first.order > WRAPPED_CAUSE_LINES:
            break
        if e.category != Category.UNKNOWN:
            return e
    return first


def _rank(e: Event) -> int | None:
    return e.rank if e.rank is not None else e.task


def _scheduler(a: Analysis, outcome: str | None) -> Verdict | None:
    if outcome not in ("timeout", "preempted", "admin_cancelled"):
        return None
    lines = [e.line for e in a.events if e.match.id.startswith("slurm_")][:3]
    what = {
        "timeout": "the job reached its time limit",
        "preempted": "the job was preempted",
        "admin_cancelled": "the job was cancelled by an administrator",
    }[outcome]
    return Verdict(Category.SCHEDULER, outcome, what, 0.9, evidence=lines,
                   kind=AnomalyKind.CRASH, outcome=outcome)  # fmt: skip


def _cascade_only(a: Analysis) -> Verdict | None:
    cascades = [e for e in a.events if e.cascade and e.serious and e.actor is not None]
    if not cascades:
        return None
    reporting = {e.actor for e in cascades}
    actors = a.actors()
    # Silent: an actor of the kind that reported (ranks vs srun tasks vs hosts name the same
    # processes differently; a task number is not a rank that kept quiet).
    kinds = {x[0] for x in reporting if x}
    silent = sorted(
        x for x in actors - reporting - {e.actor for e in a.events if e.root} if x[:1] in kinds
    )
    hang = any(e.match.kind == AnomalyKind.HANG for e in cascades)
    culprits: list[str] = []
    ranks: list[int] = []
    if silent and len(silent) < len(actors):
        culprits = sorted({n for s in silent if (n := a.node_of_actor(s)) is not None})
        ranks = sorted(int(s[1:]) for s in silent if s[1:].isdigit())
    # The peers they lost, where the address names one of the job's nodes (NodeAddr).
    peers = {n for e in cascades if (n := _peer_node(a, e)) is not None and n in a.node_list}
    # Ranks a reporter names as the ones that never arrived (monitored_barrier).
    named = sorted({int(r) for e in cascades for r in _RANK_LIST.findall(
        e.match.groups.get("peer_ranks") or "")})  # fmt: skip
    if named:
        ranks = named
        culprits = sorted({n for r in named if (n := a.topo.node_of(None, r)) is not None})
    if peers and len(peers) < len(a.node_list):
        narrowed = sorted(peers & set(culprits)) if culprits else []
        culprits = narrowed or sorted(peers)
    what = "timed out waiting" if hang else "lost their connection"
    who = f"; silent: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" + (
        f" on {', '.join(culprits)}" if culprits else "") if ranks else ""  # fmt: skip
    evidence = [e.line for e in cascades[:6]] + _exit_lines(a, culprits)
    first = min(cascades, key=lambda e: e.order)
    return Verdict(
        Category.UNKNOWN, "hang|collective" if hang else f"cascade|{first.match.id}",
        f"{len(reporting)} rank(s) {what} for a peer{who}", 0.5 if culprits else 0.4,
        culprits=culprits, ranks=ranks, evidence=evidence,
        kind=AnomalyKind.HANG if hang else AnomalyKind.CRASH,
    )  # fmt: skip


def _nothing(a: Analysis) -> Verdict:
    if a.running:
        if a.offline and (fine := running_fine(a)) is not None:
            return fine
        return Verdict(
            Category.UNKNOWN, "hang", "no training progress and no error in the output"
            + (f" (last iteration {a.scan.max_iteration})" if a.scan.max_iteration is not None
               else ""),
            0.4, evidence=a.lines[-3:], kind=AnomalyKind.HANG,
        )  # fmt: skip
    job = a.job
    code = f"{job.exit_code}:{job.exit_signal}" if job is not None else "?"
    state = job.state if job is not None else "ended"
    return Verdict(
        Category.UNKNOWN, f"exit|{code}", f"job {state} with exit code {code} and no recognised "
        "error", 0.3, evidence=[x.line for x in a.scan.exit_order[:3]] or a.lines[-3:],
        kind=AnomalyKind.CRASH,
    )  # fmt: skip


# ---------------------------------------------------------------------------- entry points
class Progress(NamedTuple):
    max_iteration: int | None
    resumed_from: int | None


def attribute(
    registry: Registry,
    anomaly: Anomaly | None,
    lines: list[LogLine],
    obs: JobObservation | None,
    nodes: list[NodeObservation],
    node_list: list[str],
    *,
    node_logs: Mapping[str, list[LogLine]] | None = None,
    scheduler_lines: list[LogLine] | None = None,
    metrics: list[LogLine] | None = None,
) -> Attribution:
    """Name the kind, category, culprit nodes and evidence of one attempt's failure.

    `anomaly` is the live detector's finding (its kind is kept); without one (offline bundles)
    the kind is inferred. `obs`/`nodes` are fresh scheduler observations, `scheduler_lines` any
    scheduler text (scontrol/sacct/sinfo/slurmctld), `node_logs` node-side files per host and
    `metrics` Prometheus text.
    """
    return analyse(
        registry, anomaly, lines, obs, nodes, node_list,
        node_logs=node_logs, scheduler_lines=scheduler_lines, metrics=metrics,
    )[0]  # fmt: skip


def analyse(
    registry: Registry,
    anomaly: Anomaly | None,
    lines: list[LogLine],
    obs: JobObservation | None,
    nodes: list[NodeObservation],
    node_list: list[str],
    *,
    node_logs: Mapping[str, list[LogLine]] | None = None,
    scheduler_lines: list[LogLine] | None = None,
    metrics: list[LogLine] | None = None,
) -> tuple[Attribution, Progress]:
    """`attribute`, plus the attempt's training progress as its output shows it."""
    facts = parse_scheduler(scheduler_lines or [])
    if obs is not None:
        facts.job = obs
    for node in nodes:
        facts.nodes[node.name] = node
    a = Analysis(registry, lines, facts, node_list, node_logs or {}, metrics or [])
    a.offline = anomaly is None
    if anomaly is None or anomaly.kind != AnomalyKind.CRASH:
        a.forget_survived()
    outcome = a.scheduler_outcome()
    live_straggler = anomaly is not None and anomaly.kind == AnomalyKind.STRAGGLER
    verdict = (
        _healthy(a)
        or _owner_cancel(a, outcome)
        or _node_failure(a, outcome)
        or (running_fine(a) if a.offline and a.running and not live_straggler else None)
        or _hardware(a)
        or (stragglers(a) if live_straggler else None)
        or _root_failure(a)
        or _scheduler(a, outcome)
        or _cascade_only(a)
        or (stragglers(a) if a.running else None)
        or _nothing(a)
    )
    if (
        anomaly is not None
        and anomaly.suspects
        and not verdict.culprits
        and anomaly.kind in (AnomalyKind.STRAGGLER, AnomalyKind.HANG)
        and verdict.category in (Category.UNKNOWN, *HARDWARE_CATEGORIES)
    ):
        verdict.culprits = [n for n in anomaly.suspects if a.in_job(n)]
        verdict.summary += f" (detection singled out {', '.join(verdict.culprits)})"
    progress = Progress(a.scan.max_iteration, a.scan.resumed_from)
    return _finish(a, verdict, anomaly, outcome), progress


def _kind(a: Analysis, verdict: Verdict, anomaly: Anomaly | None) -> Kind:
    if verdict.category == Category.NONE:
        return "none"
    if anomaly is not None:
        return anomaly.kind
    if verdict.kind is not None:
        return verdict.kind
    fatal_in_log = any(e.root and e.serious for e in a.events)
    if a.running and not fatal_in_log:
        return AnomalyKind.HANG
    decisive = [e for e in a.events if e.root and e.serious and e.line in verdict.evidence]
    if decisive and all(e.match.kind == AnomalyKind.HANG for e in decisive):
        return AnomalyKind.HANG
    if not decisive and _hung_first(a):
        # The cause left no error in the job's output (it is in a node's logs, or nowhere).
        return AnomalyKind.HANG
    return AnomalyKind.CRASH


def _hung_first(a: Analysis) -> bool:
    """The job's output first shows it stuck (a collective timed out) before anything died,
    as the live watch reports it: whatever then failed, the symptom was a hang."""
    signs = [(e.order, e.match.kind == AnomalyKind.HANG) for e in a.events
             if e.serious and (e.root or e.cascade) and e.origin == "job"]  # fmt: skip
    signs += [(x.order, False) for x in a.scan.exit_order
              if x.status != "terminated" and not x.after_termination]  # fmt: skip
    return bool(signs) and min(signs)[1]


def _finish(a: Analysis, v: Verdict, anomaly: Anomaly | None, outcome: str | None) -> Attribution:
    kind = _kind(a, v, anomaly)
    if kind == "none":
        return Attribution(
            kind="none", category=Category.NONE, confidence=v.confidence, fingerprint="none",
            summary=v.summary, evidence=_dedupe(v.evidence),
        )  # fmt: skip
    category = v.category if v.category != Category.NONE else Category.UNKNOWN
    checkpoint = any(
        e.checkpoint_save
        and e.root
        and e.serious
        and (a.kill_order is None or e.order < a.kill_order)
        for e in a.events
    )
    culprits = sorted({c for c in v.culprits if c})
    return Attribution(
        kind=kind,
        category=category,
        culprit_nodes=culprits,
        culprit_ranks=sorted(set(v.ranks)),
        culprit_gpus=sorted(set(v.gpus)),
        confidence=round(min(max(v.confidence, 0.0), 1.0), 2),
        fingerprint=fingerprint(category, v.key),
        summary=v.summary[:500],
        evidence=_dedupe(v.evidence),
        scheduler_outcome=v.outcome if v.outcome is not None else _outcome_for(outcome),
        checkpoint_failure=checkpoint,
    )


def _outcome_for(outcome: str | None) -> str | None:
    # A failure found in the log keeps the scheduler's verdict only where it shapes the budget.
    return outcome if outcome in ("timeout", "preempted", "node_fail") else None


def _dedupe(lines: Iterable[LogLine]) -> list[LogLine]:
    seen: set[tuple[str, int]] = set()
    out: list[LogLine] = []
    for line in lines:
        key = (line.source, line.line_no)
        if key in seen:
            continue
        seen.add(key)
        out.append(line.model_copy(update={"text": line.text[:2000]}))
        if len(out) >= MAX_EVIDENCE:
            break
    return out


def attribute_bundle(
    bundle: Bundle, registry: Registry | None = None
) -> tuple[Attribution, Progress]:
    """The offline path: the same rules over an evidence bundle, kind inferred."""
    return analyse(
        registry or Registry.default(),
        None,
        bundle.job,
        None,
        [],
        [],
        node_logs=bundle.node_logs,
        scheduler_lines=bundle.scheduler,
        metrics=bundle.metrics,
    )
