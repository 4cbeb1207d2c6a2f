"""One node with a different NCCL package than the rest of the job, from the nodes' own files.

NCCL requires every rank of a communicator to load the same NCCL version (NCCL user guide,
troubleshooting: a version mismatch across ranks fails or hangs initialisation; NCCL >= 2.x
checks and prints `Mismatched NCCL version detected`, older releases simply wait). When the job
takes NCCL from the nodes' packages, a node whose package differs (left behind by an upgrade
of the others, installed by hand) is that node's software: excluding it lets the job run.

Read from package listings in node files: `rpm -qa` (`libnccl-2.2.13-1+cuda10.0.x86_64`),
`dpkg -l` (`ii  libnccl2  2.18.3-1+cuda12.2  amd64  NVIDIA Collective Communication Library`)
and pip (`nvidia-nccl-cu12  2.20.5`). A listing belongs to the host whose file holds it; a `#`
note in that file naming other hosts (`# c4140-11 and c4140-13: libnccl-2.3.5-2+cuda10.0`)
speaks for them.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import Category, LogLine
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

_PACKAGE = re.compile(
    r"\b(?:libnccl2?(?:-devel|-dev)?[-\s]+|nvidia-nccl-cu\d{2}\s+)(?P<v>\d{1,2}\.\d{1,3}\.\d{1,3})\b"
)
_HOSTLIKE = re.compile(r"\b[A-Za-z][\w-]*?(?:\[[\d,-]+\]|\d+)[\w-]*(?![\w\[])")


def nccl_packages(a: Analysis) -> dict[str, tuple[str, LogLine]]:
    """Job node -> (its NCCL package version, the line showing it)."""
    out: dict[str, tuple[str, LogLine]] = {}
    for name, lines in a.node_logs.items():
        host = a.topo.hosts.canonical(name) or name
        for entry in lines:
            if "nccl" not in entry.text or (m := _PACKAGE.search(entry.text)) is None:
                continue
            owners = [host]
            if entry.text.lstrip().startswith("#"):
                named = _job_hosts(a, entry.text[: m.start()])
                if not named:
                    continue  # (a note about some other machine)
                owners = named
            for node in owners:
                if a.in_job(node):
                    out.setdefault(node, (m["v"], entry))
    return out


def _job_hosts(a: Analysis, text: str) -> list[str]:
    found: list[str] = []
    for m in _HOSTLIKE.finditer(text):
        try:
            names = expand_hostlist(m.group(0), limit=256)
        except ParseError:
            continue
        found += [n for n in names if a.in_job(n)]
    return found


def odd_nccl_package(a: Analysis, v: Verdict) -> Verdict:
    """`v` (no culprit, no cause) as the one node whose NCCL package differs from the rest."""
    if v.category not in (Category.UNKNOWN,) or v.culprits:
        return v
    packages = nccl_packages(a)
    versions: dict[str, list[str]] = {}
    for node, (version, _) in packages.items():
        versions.setdefault(version, []).append(node)
    if len(versions) != 2 or len(packages) < 3:
        return v
    odd = min(versions.values(), key=len)
    if len(odd) * 2 >= len(packages):
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_package_differs",
        f"{v.summary}; {', '.join(sorted(odd))} has NCCL {packages[odd[0]][0]} installed while the "
        "job's other nodes have another version (every rank must load the same NCCL)", 0.75,
        culprits=sorted(odd), ranks=v.ranks, evidence=[packages[odd[0]][1], *v.evidence[:2]],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
