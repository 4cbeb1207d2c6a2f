"""Which GPU Megatron-LM's result validation found computing wrongly.

With `--rerun-mode validate_results` Megatron-LM's rerun state machine (megatron/core/
rerun_state_machine.py) logs, on the rank whose result it rejected, `Unexpected result nan on
rank 43 at iteration #18204 invocation #1 (message='...')`, reruns the step, and concludes
`Possible transient error!` (not reproducible on the same GPU) or, after resuming on other GPUs,
`Second rerun: unexpected result is not reproducible on a different GPU` and `Possible
persistent error!`. Its own failure lines name the node and device (`Rank 43, node gpu-r3-14,
device 3, iteration #18204: Possible persistent error!`); the conclusion is often printed by
rank 0 only, whose node is not the suspect. The suspect is the rank of the last `Unexpected
result` line before the conclusion, on the node that rank ran on when it printed it.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.events import Event
from resurgo.detect.lines import strip_prefixes

RERUN_IDS = frozenset({"megatron_rerun_not_reproducible"})
_UNEXPECTED = re.compile(r"\bUnexpected result .{1,200}? on rank (?P<rank>\d{1,7}) at iteration #")


def rerun_suspects(a: Analysis, events: list[Event]) -> dict[int, str]:
    """id(event) -> the node of the GPU the rerun check found at fault, for its conclusions."""
    out: dict[int, str] = {}
    for e in events:
        if e.match.id not in RERUN_IDS or e.origin != "job":
            continue
        named = a.topo.hosts.canonical(e.match.groups.get("node"))
        if named is None:
            named = _rank_of_last_unexpected(a, e.order)
        if named is not None:
            out[id(e)] = named
    return out


def _rank_of_last_unexpected(a: Analysis, before: int) -> str | None:
    for entry in reversed(a.lines[:before]):
        if "Unexpected result" not in entry.text:
            continue
        m = _UNEXPECTED.search(entry.text)
        if m is None:
            continue
        pre = strip_prefixes(entry.text)
        said = int(m["rank"])
        # (Its own prefix places it, where it has one: its task, else its rank.)
        return a.topo.node_of(pre.task, pre.rank if pre.rank is not None else said)
    return None
