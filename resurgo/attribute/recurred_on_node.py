"""An operator's note that earlier failures of this kind all had one of this run's nodes in them.

attribution-labels.md names the hardware when a fault follows one node across restarts (Xid 13
on the same GPU across restarts is the board's). Sites keep that history in notes beside the
logs: `# earlier jobs of this case that hit the same class of init errors all had nid005517 or
nid008122 in the allocation`, `# five jobs since May failed with 'tau/ssa values out of range';
in each the failing rank was on nid06217`. When the note names exactly one node of this run as
the common one, that node is the suspect: its hardware (the board when the
failure is the GPU's own error, else the host), left out of the next attempt. The logs' own
node evidence, when there is any, decides first (`recurred_elsewhere` reads the opposite note:
the failure followed the job to other nodes).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.site_notes import short_notes
from resurgo.contracts import HARDWARE_CATEGORIES, AnomalyKind, Category, LogLine

_EACH = re.compile(
    r"(?i)\b(?:all|each|every (?:one|time|attempt|run|try)|always|in each case|in every case)\b"
)
_FAILURES = re.compile(r"(?i)\b(?:jobs|runs|failures|attempts?|crashes|aborts)\b")
_FAILED = re.compile(r"(?i)\b(?:fail|died|dies|hung|hang|abort|crash|error)")
_ELSEWHERE = re.compile(r"(?i)\b(?:different|other|another|disjoint) (?:nodes?|hosts?)\b")
# A job of one node: the note may call it `this GPU` or `this machine` (`# fails like this on
# every attempt on this GPU ...; the same script runs to completion on other machines`).
_THIS = re.compile(r"(?i)\bon this (?:GPU|card|node|host|machine|workstation|server)\b")
# ... and say that the job ran elsewhere, which is no recurrence elsewhere.
_WORKS_ELSEWHERE = re.compile(
    r"(?i)\b(?:runs?|ran|works?|worked|completes?|completed|trains?|trained|succeeds?|succeeded)"
    r"(?: [\w-]+){0,3} (?:on|elsewhere)(?: (?:other|different|another) (?:nodes?|hosts?|"
    r"machines?|GPUs?|servers?))?\b"
)
_GPU_FAULT = re.compile(r"(?i)\bcuda|\bgpu\b|\bxid\b|\bnccl\b|\bnvrm\b|\bcudnn\b")


def recurred_on_node(a: Analysis, v: Verdict) -> Verdict:
    """`v` as one node's hardware when a note says the failures all had that node."""
    if v.category in (Category.NONE, Category.SCHEDULER, *HARDWARE_CATEGORIES):
        return v
    if v.kind == AnomalyKind.STRAGGLER or (v.culprits and len(v.culprits) > 1):
        return v
    ours = sorted({n.split(".", 1)[0] for n in a.job_nodes()})
    found = _note(a, ours)
    if found is None:
        return v
    note, node = found
    said = " ".join([v.summary, *(e.text for e in v.evidence[:3])])
    category = Category.HARDWARE_GPU if _GPU_FAULT.search(said) else Category.HARDWARE_HOST
    return Verdict(
        category, "recurred_on_node", f"{v.summary}; earlier failures of this kind all had "
        f"{node} (an operator's note): its hardware", 0.7,
        culprits=[node], ranks=v.ranks, evidence=[note, *v.evidence[:2]], kind=v.kind,
    )  # fmt: skip


def _note(a: Analysis, ours: list[str]) -> tuple[LogLine, str] | None:
    for entry, text in short_notes(a):
        if not (_EACH.search(text) and _FAILURES.search(text) and _FAILED.search(text)):
            continue
        works_elsewhere = _WORKS_ELSEWHERE.search(text)
        if _ELSEWHERE.search(_WORKS_ELSEWHERE.sub("", text) if works_elsewhere else text):
            continue
        named = [n for n in ours if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]
        if len(named) == 1:
            return entry, named[0]
        if not named and len(ours) == 1 and works_elsewhere and _THIS.search(text):
            return entry, ours[0]
    return None
