"""Job arrays: what the failures of many tasks say together. Pure functions of recorded inputs
(no I/O, no clocks), so the array coordinator replays to the same decisions.

Two findings, each from distinct tasks (a task failing twice the same way is the per-task
budget's business, not evidence that the array is broken):

- **systematic**: `arrays.systematic_failures` tasks failed with one root-cause fingerprint of a
  kind a retry cannot fix (application, system software, unknown) on more than one node. It is
  a bug in the code, the data or the container: stop retrying it, hold the pending tasks.
  The same fingerprint failing only ever on one node says more about that node than the code,
  and is left to the node rule.
- **node**: a node implicated in failures of `arrays.node_failures` different tasks is excluded
  for the array's pending tasks. A failure implicates the nodes attribution blamed; with no
  culprit, the node a single-node task ran on. A systematic bug implicates no node (it fails
  everywhere), unless attribution itself blamed one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from resurgo.array_models import (
    ArrayAssessment,
    ArrayVerdict,
    NodeFinding,
    SystematicFinding,
    TaskFailure,
)
from resurgo.contracts import Advice, AdviceKind, Category, PolicyConfig

# Root causes a retry of the same code cannot fix, so that many tasks sharing one is the code's.
SYSTEMATIC_CATEGORIES = frozenset(
    {Category.APPLICATION, Category.SYSTEM_SOFTWARE, Category.UNKNOWN}
)
# Nobody's fault (preemption, time limit, owner cancel): never evidence against a node or code.
NEUTRAL_CATEGORIES = frozenset({Category.SCHEDULER, Category.NONE})
# A fingerprint that only says attribution did not work names no shared cause.
UNINFORMATIVE_FINGERPRINTS = frozenset({"", "unknown:attribution-failed"})


def _tasks(failures: Iterable[TaskFailure]) -> list[int]:
    return sorted({f.task_id for f in failures})


def systematic_findings(failures: Sequence[TaskFailure], threshold: int) -> list[SystematicFinding]:
    """Fingerprints that failed `threshold` distinct tasks, not all on one same node, in order
    of first appearance."""
    if threshold <= 0:
        return []
    groups: dict[str, list[TaskFailure]] = {}
    for failure in failures:
        if failure.category not in SYSTEMATIC_CATEGORIES:
            continue
        if failure.fingerprint in UNINFORMATIVE_FINGERPRINTS:
            continue
        groups.setdefault(failure.fingerprint, []).append(failure)
    found: list[SystematicFinding] = []
    for fingerprint, group in groups.items():
        tasks = _tasks(group)
        if len(tasks) < threshold:
            continue
        if on_one_node(group):
            continue  # always the same node: the node rule's case
        nodes = sorted({n for f in group for n in f.nodes})
        found.append(
            SystematicFinding(
                fingerprint=fingerprint,
                category=group[0].category,
                tasks=tasks,
                nodes=nodes,
                summary=group[0].summary[:500],
            )
        )
    return found


def on_one_node(group: Sequence[TaskFailure]) -> bool:
    """Every failure ran on the same single node (a failure whose nodes are unknown might have
    run anywhere, so it breaks the pattern)."""
    shapes = {tuple(f.nodes) for f in group}
    return len(shapes) == 1 and len(next(iter(shapes))) == 1


def implicated_nodes(failure: TaskFailure, systematic: frozenset[str]) -> set[str]:
    """The nodes one failure counts against."""
    if failure.category in NEUTRAL_CATEGORIES:
        return set()
    if failure.culprit_nodes:
        return {n for n in failure.culprit_nodes if n}
    if failure.fingerprint in systematic:
        return set()
    return set(failure.nodes) if len(failure.nodes) == 1 else set()


def nodes_by_tasks(
    failures: Sequence[TaskFailure], systematic: frozenset[str] = frozenset()
) -> dict[str, list[int]]:
    """Node -> the distinct tasks whose failures implicate it."""
    found: dict[str, set[int]] = {}
    for failure in failures:
        for node in implicated_nodes(failure, systematic):
            found.setdefault(node, set()).add(failure.task_id)
    return {node: sorted(tasks) for node, tasks in sorted(found.items())}


def assess(
    failures: Sequence[TaskFailure], policy: PolicyConfig, already_excluded: Sequence[str] = ()
) -> ArrayAssessment:
    """Everything the array's failures so far call for. `already_excluded`: nodes the pending
    tasks exclude already (they stay first, and count against the cap)."""
    systematic = systematic_findings(failures, policy.arrays.systematic_failures)
    excluded: list[NodeFinding] = []
    over_cap: list[NodeFinding] = []
    if policy.arrays.node_failures > 0:
        fps = frozenset(s.fingerprint for s in systematic)
        counted = nodes_by_tasks(failures, fps)
        candidates = [
            NodeFinding(node=node, tasks=tasks)
            for node, tasks in counted.items()
            if len(tasks) >= policy.arrays.node_failures
        ]
        # The most implicated first, then by name: a stable order whatever the report order.
        candidates.sort(key=lambda f: (-len(f.tasks), f.node))
        kept = set(already_excluded)
        room = policy.max_nodes_excluded_per_job - len(kept)
        for finding in candidates:
            if finding.node in kept:
                excluded.append(finding)
            elif room > 0:
                excluded.append(finding)
                room -= 1
            else:
                over_cap.append(finding)
    return ArrayAssessment(
        systematic=systematic,
        exclude=excluded,
        over_cap=over_cap,
        hold_pending=bool(systematic) and policy.arrays.hold_pending,
    )


def verdict(assessment: ArrayAssessment, failure: TaskFailure) -> ArrayVerdict:
    """The answer to the task that reported `failure`."""
    match = next((s for s in assessment.systematic if s.fingerprint == failure.fingerprint), None)
    reason = ""
    if match is not None:
        reason = (
            f"{failure.fingerprint} failed {len(match.tasks)} tasks of the array "
            f"({_task_list(match.tasks)}) on {len(match.nodes)} nodes: a systematic failure, "
            "not retried"
        )
    return ArrayVerdict(
        key=failure.key(),
        systematic=match is not None,
        reason=reason,
        array_excluded_nodes=sorted(f.node for f in assessment.exclude),
    )


def _task_list(tasks: Sequence[int], limit: int = 10) -> str:
    shown = ",".join(str(t) for t in tasks[:limit])
    return shown + (f",... ({len(tasks)} in all)" if len(tasks) > limit else "")


def record_failure(
    failures: Sequence[TaskFailure], failure: TaskFailure, limit: int = 5000
) -> list[TaskFailure]:
    """The failures with `failure` added once (a repeated report of the same task attempt and
    fingerprint, e.g. a retried signal, changes nothing). Bounded: the oldest go first."""
    if any(f.task_id == failure.task_id and f.key() == failure.key() for f in failures):
        return list(failures)
    return [*failures, failure][-limit:]


def apply_verdict(advice: Advice, answer: ArrayVerdict | None) -> Advice:
    """A task's own advice, given the array's verdict on its failure: a systematic failure is
    not retried (whatever budget the task has left); anything else stands as the task decided."""
    retries = advice.kind in (AdviceKind.REQUEUE, AdviceKind.REQUEUE_EXCLUDING)
    if answer is None or not answer.systematic or not retries:
        return advice
    return advice.model_copy(
        update={
            "kind": AdviceKind.STOP,
            "rule": "array_systematic",
            "reason": answer.reason,
            "nodes": [],
            "drain_nodes": [],
        }
    )


def reportable(failure_category: Category, kind: str) -> bool:
    """Whether a task's failure is worth the coordinator's time: a straggler is no failure, and
    scheduler outcomes (preemption, time limit, cancel) are nobody's fault."""
    return kind != "straggler" and failure_category not in NEUTRAL_CATEGORIES
