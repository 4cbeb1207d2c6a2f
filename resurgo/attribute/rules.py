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

The stages live by concern: `stages_outcome` (1, 2, 6, 8), `stages_hardware` (3, 4) and
`stages_root` (5, 7; `causes` narrows a root failure down to its specific cause and node).
This module runs them in order and turns the first verdict into an `Attribution`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from resurgo.attribute.analysis import Analysis, Kind, Verdict, fingerprint
from resurgo.attribute.app_hangs import application_hang
from resurgo.attribute.array_tasks import array_task_of
from resurgo.attribute.bundle import Bundle
from resurgo.attribute.container_bridge import dials_a_container_bridge
from resurgo.attribute.engine_fault import survives_engine_faults
from resurgo.attribute.firewall import firewalled_node
from resurgo.attribute.jit_extensions import sigill_in_own_build
from resurgo.attribute.kind_bounds import (
    died_of_node_fault,
    ended_by_error,
    progressing_at_time_limit,
    running_kind,
    silent_until_killed,
)
from resurgo.attribute.launch_mismatch import launch_exceeds_allocation
from resurgo.attribute.liveness import noted_running, running_fine, still_progressing
from resurgo.attribute.log_header import job_id_in_log, nodes_in_log
from resurgo.attribute.node_diagnostics import slow_link_behind
from resurgo.attribute.node_drift import collective_test_hangs_here, file_missing_on_some_nodes
from resurgo.attribute.node_local import (
    explain_unknown,
    first_exit_unnamed,
    name_node_local,
    path_error_after_fs_loss,
)
from resurgo.attribute.node_software import node_software
from resurgo.attribute.noted_error import noted_oom
from resurgo.attribute.rank_finished import rank_finished_early, rank_left_early
from resurgo.attribute.recurred_elsewhere import recurred_elsewhere
from resurgo.attribute.recurred_on_node import recurred_on_node
from resurgo.attribute.scheduler import parse_scheduler
from resurgo.attribute.shared_services import hung_on_shared_service, shared_outage
from resurgo.attribute.site_notes import noted_fabric_outage
from resurgo.attribute.stages_hardware import (
    _hardware,
    _node_failure,
    _repeating_gpu_exception,
)
from resurgo.attribute.stages_launch import (
    agent_never_started,
    loopback_coordinator,
    store_outside_allocation,
    unreachable_node,
    waiting_for_debugger,
    world_larger_than_launched,
)
from resurgo.attribute.stages_outcome import (
    _healthy,
    _nothing,
    _owner_cancel,
    _scheduler,
    _suspended,
    refine_outcome,
    stuck_in_job_code,
)
from resurgo.attribute.stages_root import _cascade_only, _root_failure, killed_by_oom
from resurgo.attribute.store_address import (
    every_node_dials_itself,
    separate_worlds,
    store_host_is_a_hostlist,
)
from resurgo.attribute.store_clash import store_on_two_hosts, store_started_twice
from resurgo.attribute.stragglers import stragglers
from resurgo.attribute.switch_ports import switch_port_down
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
from resurgo.detect.lines import memoised_prefixes
from resurgo.detect.registry import Registry

MAX_EVIDENCE = 20


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


@survives_engine_faults(lambda verdict: (verdict, Progress(None, None)))
@memoised_prefixes()  # every pass over the lines peels each line's prefixes once
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
    scheduler_lines = scheduler_lines or []
    facts = parse_scheduler(
        scheduler_lines, job_id_in_log(lines), array_task_of(lines, scheduler_lines)
    )
    if obs is not None:
        facts.job = obs
    for node in nodes:
        facts.nodes[node.name] = node
    if not node_list and not (facts.job is not None and facts.job.node_list):
        node_list = nodes_in_log(lines)
    a = Analysis(registry, lines, facts, node_list, node_logs or {}, metrics or [])
    a.offline = anomaly is None
    if a.offline and a.state is None and noted_running(a):
        a.state = "RUNNING"  # an operator's note states the job was still running
    if anomaly is None or anomaly.kind != AnomalyKind.CRASH:
        a.forget_survived()
    outcome = refine_outcome(a, a.scheduler_outcome())
    live_straggler = anomaly is not None and anomaly.kind == AnomalyKind.STRAGGLER
    verdict = (
        _healthy(a, outcome)
        or application_hang(a, outcome)  # (stuck on its own code: however it ended)
        or hung_on_shared_service(a, outcome)  # (stuck on a lost file system: however it ended)
        or _owner_cancel(a, outcome)
        or _node_failure(a, outcome)
        or stuck_in_job_code(a)
        or (
            running_fine(a)
            if a.offline and a.running and not live_straggler and not _pending_again(a, outcome)
            else None
        )  # (pending again after a requeue or a preemption: not running)
        or _repeating_gpu_exception(a)
        or unreachable_node(a)
        or firewalled_node(a)
        or progressing_at_time_limit(a, outcome)  # (ran past any node fault until the limit)
        or killed_by_oom(a)  # (before the peers' network errors it explains)
        or _hardware(a)
        or _suspended(a)
        or (stragglers(a) if live_straggler else None)
        or launch_exceeds_allocation(a)  # (waited for peers its allocation never had)
        or agent_never_started(a)
        or world_larger_than_launched(a)
        or store_started_twice(a)
        or store_on_two_hosts(a)
        or store_outside_allocation(a)
        or loopback_coordinator(a)
        or every_node_dials_itself(a)
        or separate_worlds(a)
        or dials_a_container_bridge(a)
        or store_host_is_a_hostlist(a)
        or _root_failure(a)
        or waiting_for_debugger(a, outcome)
        or _scheduler(a, outcome)
        or rank_finished_early(a)
        or rank_left_early(a)
        or _cascade_only(a)
        or (stragglers(a) if a.running else None)
        or _nothing(a)
    )
    verdict = explain_unknown(a, noted_fabric_outage(a, name_node_local(a, verdict)))
    verdict = collective_test_hangs_here(a, file_missing_on_some_nodes(a, verdict))
    verdict = switch_port_down(a, path_error_after_fs_loss(a, verdict))
    verdict = ended_by_error(a, node_software(a, shared_outage(a, verdict)))
    verdict = running_kind(a, died_of_node_fault(a, verdict))
    verdict = slow_link_behind(a, verdict)
    verdict = recurred_elsewhere(a, verdict)  # (tie-breaker 3, from an operator's note)
    verdict = first_exit_unnamed(sigill_in_own_build(a, recurred_on_node(a, verdict)))
    verdict = noted_oom(a, verdict)
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


# Lines that name a fault but end no process: NCCL logs a verbs async event on its HCA's port
# (`NET/IB : Got async event : port error`, transport/net_ib.cc's async thread) and carries on;
# what the job then shows (its collectives timing out, or an NCCL error ending it) is the kind.
NOTICES_ONLY = frozenset({"nccl_ib_async_event"})


def _kind(a: Analysis, verdict: Verdict, anomaly: Anomaly | None) -> Kind:
    if verdict.category == Category.NONE:
        return "none"
    if anomaly is not None:
        return anomaly.kind
    if verdict.kind is not None:
        return verdict.kind
    fatal_in_log = any(e.root and e.serious for e in a.events)
    if a.running and not fatal_in_log:
        # Still advancing while something slows it: a straggler, not a hang.
        slowed = still_progressing(a) and stragglers(a) is not None
        return AnomalyKind.STRAGGLER if slowed else AnomalyKind.HANG
    # By (source, line number): comparing pydantic LogLines one by one made this quadratic.
    shown = {(x.source, x.line_no) for x in verdict.evidence}
    decisive = [
        e for e in a.events
        if e.root and e.serious and (e.line.source, e.line.line_no) in shown
        and e.match.id not in NOTICES_ONLY
    ]  # fmt: skip
    actors = {e.actor for e in decisive}
    died = any(  # the stuck ranks then died of their own error (pdb quitting at EOF)
        e.root and e.serious and e.match.kind == AnomalyKind.CRASH and e.actor in actors
        and e.category == verdict.category and e.order > min(d.order for d in decisive)
        for e in a.events
    ) if decisive else False  # fmt: skip
    if decisive and not died and all(e.match.kind == AnomalyKind.HANG for e in decisive):
        return AnomalyKind.HANG
    if not decisive and _hung_first(a):
        # The cause left no error in the job's output (it is in a node's logs, or nowhere).
        return AnomalyKind.HANG
    if silent_until_killed(a):
        return AnomalyKind.HANG  # (its error did not end it: it sat stuck until Slurm did)
    return AnomalyKind.CRASH


def _hung_first(a: Analysis) -> bool:
    """The job's output first shows it stuck (a collective timed out) before anything died,
    as the live watch reports it: whatever then failed, the symptom was a hang."""
    shown = [e for e in a.events if e.serious and (e.root or e.cascade) and e.origin == "job"]
    # A rank that later times out waiting in its collective (the watchdog's report, a
    # cascade) was still alive: an error it printed before (c10d's heartbeat warning that
    # the store is gone) did not end it.
    waited = {e.actor: e.order for e in shown if e.match.kind == AnomalyKind.HANG and e.cascade}
    signs = [
        (e.order, e.match.kind == AnomalyKind.HANG) for e in shown
        if (e.match.kind == AnomalyKind.HANG or e.order > waited.get(e.actor, -1))
        and e.match.id not in NOTICES_ONLY
    ]  # fmt: skip
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
    # A node outside the job's allocation (a file system's server, the store's login node) is
    # nothing the next attempt can exclude: the job met it as a shared service.
    inside = [c for c in culprits if a.in_job(c)]
    if culprits and not inside:
        v.summary += f" ({', '.join(culprits)}: not one of the job's nodes, a shared service)"
    culprits = inside
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
        scheduler_outcome=v.outcome if v.outcome is not None else _outcome_for(outcome, v),
        checkpoint_failure=checkpoint,
    )


def _outcome_for(outcome: str | None, v: Verdict) -> str | None:
    # A failure found in the log keeps the scheduler's verdict only where it shapes the budget.
    if (
        outcome == "timeout"
        and v.culprits
        and v.category in (*HARDWARE_CATEGORIES, Category.SYSTEM_SOFTWARE)
    ):
        # A node's fault hung the job and the time limit only ended it: the node is the cause.
        return None
    if outcome == "timeout" and v.category == Category.APPLICATION:
        # The job's own code hung it and the time limit only ended it: resubmitting, however
        # far it got, runs into the same code.
        return None
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


def _pending_again(a: Analysis, outcome: str | None) -> bool:
    """The job waits to run again after Slurm ended its last run (requeued, preempted)."""
    return outcome == "requeued" or (a.state == "PENDING" and outcome == "preempted")


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
