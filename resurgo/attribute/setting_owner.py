"""Who owns the NCCL transport setting a generic NCCL setup failure is about.

NCCL reports a wrong transport setting only through its generic errors: a queue pair that
cannot be brought up (`misc/ibvwrap.cc NCCL WARN Call to ibv_modify_qp failed with error
Connection timed out`, then `unhandled system error`) when `NCCL_IB_GID_INDEX` selects a GID
the fabric cannot route, a bootstrap socket that cannot bind or find an interface (`NCCL WARN
Net : No interface found in the same subnet as remote address`, `Call to bind failed : Cannot
assign requested address`) when `NCCL_COMM_ID` / `NCCL_SOCKET_IFNAME` name an address the
process does not have (NVIDIA NCCL environment variables documentation,
docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; NVIDIA/nccl#331: NCCL_COMM_ID
inside a bridge-mode container).

Who set it decides the category (attribution-labels.md tie-breaker 6): what the job sets (its
script, its environment) is the application's, and the same script fails again (stop); what
the site sets (task prolog, /etc/nccl.conf, the image) is system_software. The job's ownership
is read from the job script's own trace (`+ export NCCL_IB_GID_INDEX=0`, bash -x) or an
operator's note saying the job script sets it (`# job script: export NCCL_IB_GID_INDEX=0`).
NCCL's own `NCCL_X set by environment to Y` line says the value was in effect, not who set it
(NCCL loads /etc/nccl.conf into the environment too), so it is evidence, never ownership.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.stages_common import noted_as_the_jobs
from resurgo.contracts import Category, LogLine

# The generic NCCL failures a transport setting shows up as.
GENERIC_NCCL_IDS = frozenset(
    {"nccl_system_error", "nccl_ib_verbs_call_failed", "nccl_no_socket_interface"}
)

# NCCL's detail lines, and the settings that govern what each one is about (NCCL env docs:
# NCCL_IB_GID_INDEX / NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE / NCCL_IB_ROCE_VERSION_NUM pick
# the GID a queue pair is addressed with; NCCL_COMM_ID fixes the bootstrap root's address,
# NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY the interfaces sockets use).
_IB_ADDRESSING = (
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_ROCE_VERSION_NUM",
)
_SOCKETS = ("NCCL_COMM_ID", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY")
_DETAILS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"NCCL WARN (?:NET/IB ?: ?)?Call to ibv_modify_qp failed"), _IB_ADDRESSING),
    (
        re.compile(
            r"NCCL WARN (?:N(?:et|ET/Socket) : No (?:interface|usable listening interface) found"
            r"|Call to (?:bind|connect) failed)"
            r"|NCCL (?:WARN|INFO) Bootstrap : no socket interface found"
            r"|NCCL WARN .{0,40}\bbootstrap\b"
        ),
        _SOCKETS,
    ),
)
# (bash -x's `+ export NAME=value`, or the script's own `export` echoed: a bare `NAME=value` is
# an `env` printout, which says the value was in effect, not who set it.)
_TRACED = re.compile(r"^(?:\++ ?(?:export )?|export )(?P<name>NCCL_[A-Z_]+)=")
_IN_EFFECT = re.compile(r"\b(?P<name>NCCL_[A-Z_]+) set by environment to\b")
MAX_SCANNED = 400


def _governing(a: Analysis) -> set[str]:
    """The settings the job's NCCL detail lines are about."""
    names: set[str] = set()
    for entry in a.lines[:MAX_SCANNED]:
        if "NCCL WARN" not in entry.text and "NCCL INFO Bootstrap" not in entry.text:
            continue
        for pattern, settings in _DETAILS:
            if pattern.search(entry.text):
                names.update(settings)
    return names


def _owned(a: Analysis, names: set[str]) -> tuple[str, LogLine] | None:
    """A governing setting the job's own script sets, with the line that says so."""
    head = a.lines[:MAX_SCANNED]
    for entry in head:
        # (bash -x prints `+ export A=1 B=2` for one export of several names.)
        text = entry.text.lstrip()
        if _TRACED.match(text):
            for name in names:
                if re.search(rf"(?:^|\s){name}=", text):
                    return name, entry
    for name in sorted(names):
        if (noted := noted_as_the_jobs(head, name)) is not None:
            return name, noted
    return None


def job_owned_transport(a: Analysis, v: Verdict) -> Verdict:
    """A generic NCCL setup failure about a transport setting the job's script sets: the
    job's configuration (application, stop), not the node's or the network's."""
    if v.culprits or v.category not in (Category.SYSTEM_SOFTWARE, Category.HARDWARE_NETWORK):
        return v
    if v.key.split("|", 1)[0] not in GENERIC_NCCL_IDS:
        return v
    if any(e.hardware and e.root and e.serious for e in a.node_events):
        return v  # (a node's own link or HCA failed: the hardware it is)
    names = _governing(a)
    if not names or (owned := _owned(a, names)) is None:
        return v
    name, line = owned
    in_effect = [
        e for e in a.lines[:MAX_SCANNED]
        if (m := _IN_EFFECT.search(e.text)) is not None and m["name"] == name
    ][:1]  # fmt: skip
    return Verdict(
        Category.APPLICATION, v.key, f"{v.summary}: {name} set by the job script", 0.85,
        ranks=v.ranks, evidence=[line, *in_effect, *v.evidence], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
