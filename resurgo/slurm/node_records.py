"""Node records from Slurm's JSON output: `scontrol --json show node` (23.02 on) or `sinfo --json`
(21.08-22.05, which prints the same node records; from 23.02 it prints partition summaries).

A node's reason is the one field of a node record that may hold a job's text (Resurgo's own
drain reasons quote job output). In text output it is split from the fields around it by
guesswork; here it is one JSON string. Each record becomes the NodeObservation the text parser
would make of `scontrol show -o node` for that moment (`parsers.node_observation` builds both):
the state as `BASE+FLAG+...` in Slurm's flag order, and the reason with Slurm's `[user@time]`
after its first line, built from `reason_set_by_user` and `reason_changed_at` (so the time the
circuit breaker reads is Slurm's, whatever the reason text holds). The shapes: 22.05 `state`
is the lower-case base state with `state_flags` beside it; 23.02 on `state` is a list of both.

A record that does not fit costs that node (logged), never the listing.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from resurgo.contracts import NodeObservation
from resurgo.slurm.json_records import number, text
from resurgo.slurm.parsers import node_observation

log = logging.getLogger(__name__)

# Slurm's base states, and its flags in the order `scontrol show node` prints them
# (`node_state_flags[]` in src/common/slurm_protocol_defs.c).
BASE_STATES = frozenset({"IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN"})
FLAG_ORDER = (
    "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG", "FAIL",
    "MAINTENANCE", "POWER_DOWN", "POWER_UP", "PERFCTRS", "POWERED_DOWN", "REBOOT_REQUESTED",
    "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED", "POWERING_UP",
    "POWERING_DOWN",
)  # fmt: skip
_RANK = {flag: i for i, flag in enumerate(FLAG_ORDER)}
# Epoch seconds beyond this are not times (and would not fit a datetime).
_MAX_EPOCH = 253402300799
# What `scontrol show -o node` puts before each further line of a multi-line reason.
_CONTINUATION = " " + " " * 7


def node_list(output: str) -> list[dict[str, Any]] | None:
    """The raw node records of a JSON answer; None when `output` is not a JSON document with
    a node list (an older command printing text, or `sinfo --json` of 23.02 on)."""
    if not output.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(output, strict=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        return None
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        log.warning("node listing reported errors: %s", repr(errors)[:500])
    return [r for r in doc["nodes"] if isinstance(r, dict)]


def observations(records: list[dict[str, Any]]) -> list[NodeObservation]:
    """Every record that fits, in Slurm's order; the others are logged and left out."""
    nodes: list[NodeObservation] = []
    for record in records:
        try:
            nodes.append(observation(record))
        except Exception as exc:  # one node's data, whatever it holds, costs only that node
            log.error("node listing: skipping a record: %s: %s", type(exc).__name__,
                      repr(str(exc))[:300])  # fmt: skip
    return nodes


def observation(record: dict[str, Any]) -> NodeObservation:
    partitions = record.get("partitions")
    return node_observation(
        text(record.get("name")),
        state(record),
        reason(record),
        [text(p) for p in partitions] if isinstance(partitions, list) else [],
    )


def state(record: dict[str, Any]) -> str:
    """`IDLE+DRAIN+MAINTENANCE`, as `scontrol show node` prints it."""
    raw = record.get("state")
    if isinstance(raw, list):
        words = [text(w).upper() for w in raw]
    else:
        flags = record.get("state_flags")
        words = [text(raw).upper(), *(text(f).upper() for f in flags or [])]
    bases = [w for w in words if w in BASE_STATES]
    flags = [w for w in dict.fromkeys(words) if w and w not in BASE_STATES]
    flags.sort(key=lambda f: _RANK.get(f, len(FLAG_ORDER)))
    return "+".join(bases[:1] + flags)


def reason(record: dict[str, Any]) -> str:
    """The reason as `scontrol show -o node` prints it: its lines (empty ones dropped), Slurm's
    `[user@time]` after the first when Slurm recorded when it was set."""
    lines = [line for line in text(record.get("reason")).split("\n") if line]
    if not lines:
        return ""
    first = lines[0]
    at = number(record.get("reason_changed_at"))
    if at and 0 < at <= _MAX_EPOCH:
        when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        first += f" [{text(record.get('reason_set_by_user'))}@{when}]"
    return first + "".join(_CONTINUATION + line for line in lines[1:])
