"""Offline attribution of an evidence bundle, and what the default policy would do about it.

`resurgo attribute BUNDLE_DIR [--json]`, the corpus test and the accuracy benchmark all go
through `analyse_bundle`, which runs the same rules as the live attribute activity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resurgo.attribute.bundle import Bundle, BundleError, load_bundle
from resurgo.attribute.rules import attribute_bundle
from resurgo.contracts import (
    Advice,
    AdviceKind,
    AttemptRecord,
    Attribution,
    Directive,
    PolicyConfig,
    RecoveryState,
)
from resurgo.detect.registry import Registry
from resurgo.policy.decide import decide

# The action vocabulary of the offline report (`requeue_excluding` is spelt out).
ACTION_NAMES = {
    AdviceKind.REQUEUE: "requeue",
    AdviceKind.REQUEUE_EXCLUDING: "requeue_excluding_nodes",
    AdviceKind.STOP: "stop",
    AdviceKind.NONE: "none",
}

__all__ = ["ACTION_NAMES", "BundleError", "Report", "analyse_bundle", "default_advice"]


@dataclass(frozen=True)
class Report:
    bundle: Bundle
    attribution: Attribution
    advice: Advice

    @property
    def action(self) -> str:
        return ACTION_NAMES[self.advice.kind]

    def as_json(self) -> dict[str, Any]:
        a = self.attribution
        return {
            "kind": a.kind if isinstance(a.kind, str) else a.kind.value,
            "category": a.category.value,
            "culprit_nodes": list(a.culprit_nodes),
            "action": self.action,
            "confidence": a.confidence,
            "fingerprint": a.fingerprint,
            "evidence": [
                {"source": e.source, "line": e.line_no, "text": e.text} for e in a.evidence
            ],
            "culprit_ranks": list(a.culprit_ranks),
            "culprit_gpus": list(a.culprit_gpus),
            "summary": a.summary,
            "scheduler_outcome": a.scheduler_outcome,
            "checkpoint_failure": a.checkpoint_failure,
            "reason": self.advice.reason,
            "rule": self.advice.rule,
        }


def default_advice(
    attribution: Attribution,
    *,
    max_iteration: int | None = None,
    resumed_from: int | None = None,
    policy: PolicyConfig | None = None,
) -> Advice:
    """What `decide` does with a fresh RecoveryState, the default policy and directive.

    The fresh state holds one record for the failed attempt (as the workflow fills it in before
    deciding); with a single attempt no history-based rule can fire.
    """
    record = AttemptRecord(
        attempt=0,
        started=True,
        seen_progress=max_iteration is not None,
        max_iteration=max_iteration,
        resumed_from=resumed_from,
        fingerprint=attribution.fingerprint,
        category=attribution.category,
        checkpoint_failure=attribution.checkpoint_failure,
    )
    state = RecoveryState(attempts=[record])
    return decide(state, attribution, policy or PolicyConfig(), Directive())


def analyse_bundle(path: str | Path, registry: Registry | None = None) -> Report:
    """Attribute one bundle directory; raises `BundleError` when it cannot be read."""
    bundle = load_bundle(path)
    attribution, progress = attribute_bundle(bundle, registry)
    advice = default_advice(attribution, max_iteration=progress[0], resumed_from=progress[1])
    return Report(bundle, attribution, advice)
