"""A file some of the job's nodes lack and another of its nodes has: configuration drift.

Nodes of one partition are meant to be installed alike; when a plugin, library or module file
is missing on some of them, the job fails only where it runs there (attribution-labels.md: a
node whose local software state caused the failure is named, and when several nodes share the
same misconfiguration all are named). The bundle shows it when an operator checked the nodes
one by one: coreutils' `ls`/`stat` print `cannot access 'PATH': No such file or directory`
(`cannot stat` for stat; releases before 8.25 print PATH unquoted) on the nodes without it, and
a listing that ends with PATH on a node that has it (NVIDIA/pyxis#29: `spank_pyxis.so` absent
on three of four nodes, so `--container-image` was ignored there and the task ran on the bare
host).

Only an `unknown` verdict is made specific this way, only with a node that has the file (else
the file is simply missing everywhere, nothing to exclude) and never naming every node.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.node_diagnostics import all_node_lines
from resurgo.contracts import AnomalyKind, Category, LogLine

# `ls: cannot access '/usr/lib/x.so': No such file or directory`, `stat: cannot stat ...`.
_MISSING = re.compile(
    r"^(?:ls|stat): cannot (?:access|stat) ['\"\u2018]?(/[^'\"\u2019\s:]{1,1024})['\"\u2019]?: "
    r"No such file or directory"
)
# (An operator checks a few files; a file full of errors is no check, and each path is looked
# for in every line of the other nodes' files.)
_PATHS = 16
# A shell prompt, a trace or a note: the command itself names the path on every node.
_COMMAND = re.compile(r"^\s*(?:\$|#|\+ |>)")


def _lists(text: str, path: str) -> bool:
    """Whether a line of output shows `path` present: a listing ending with it (`ls -l`,
    `grep -r` output `file:line`), or a symbolic link's `path -> target`."""
    if "cannot" in text or "No such file" in text or _COMMAND.match(text):
        return False
    line = text.rstrip().removesuffix("/")
    at = len(line) - len(path) if line.endswith(path) else line.find(f"{path} ->")
    return at == 0 or (at > 0 and line[at - 1] in " \t:")


def file_missing_on_some_nodes(a: Analysis, v: Verdict) -> Verdict:
    """An `unknown` verdict made `system_software` on the nodes a file is missing from."""
    if v.category != Category.UNKNOWN:
        return v
    job = set(a.job_nodes())
    missing: dict[str, dict[str, LogLine]] = {}  # path → node → its error line
    by_node: dict[str, list[LogLine]] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node):
            continue
        by_node.setdefault(node, []).extend(lines)
        for entry in lines:
            if "No such file" in entry.text and (m := _MISSING.match(entry.text.strip())):
                path = m.group(1).rstrip("/")
                if path in missing or len(missing) < _PATHS:
                    missing.setdefault(path, {}).setdefault(node, entry)
    for path, lacking in missing.items():
        having = [
            (node, entry) for node, lines in by_node.items() if node not in lacking
            for entry in lines if _lists(entry.text, path)
        ]  # fmt: skip
        if not having or not job or len(lacking) >= len(job):
            continue
        nodes = sorted(lacking)
        return Verdict(
            Category.SYSTEM_SOFTWARE, "node_drift|missing_file",
            f"{v.summary}; {path} is missing on {', '.join(nodes)} but present on "
            f"{having[0][0]}", max(v.confidence, 0.7),
            culprits=nodes, ranks=v.ranks,
            evidence=[*(lacking[n] for n in nodes), having[0][1], *v.evidence],
            kind=v.kind,
        )  # fmt: skip
    return v


# A collective benchmark run on the node itself (nccl-tests, rccl-tests: `all_reduce_perf -g 4`)
# that hangs there, and the same work running on another node: the node's own GPU-to-GPU path
# (its driver, its IOMMU mode, its PCIe settings) is what stops the job's collectives.
_BENCH = re.compile(r"\b(?:all_reduce|all_gather|alltoall|reduce_scatter|broadcast)_perf\b")
_HANGS = re.compile(r"(?i)\b(?:hangs|hung|hanging|never (?:completes|finishes|returns))\b")
_RUNS_ELSEWHERE = re.compile(
    r"(?i)\bon (?P<other>[A-Za-z][\w-]{0,62}\d)\b[^#]{0,80}?\b(?:trains|runs|completes|works)"
    r"(?: normally| fine)?\b|\b(?:trains|runs|completes|works) normally\b"
)


def collective_test_hangs_here(a: Analysis, v: Verdict) -> Verdict:
    """A hang naming one node (the first its watchdog aborted) whose own files show a collective
    benchmark hanging on it while the same work runs on another node: that node's software."""
    if v.category != Category.UNKNOWN or len(v.culprits) != 1 or v.kind != AnomalyKind.HANG:
        return v
    node = v.culprits[0]
    lines = all_node_lines(a, node)
    hung = next(
        (e for i, e in enumerate(lines) if _BENCH.search(e.text)
         and any(_HANGS.search(x.text) for x in lines[i : i + 8])), None,
    )  # fmt: skip
    if hung is None:
        return v
    elsewhere = next(
        (e for e in lines if (m := _RUNS_ELSEWHERE.search(e.text)) is not None
         and (m["other"] is None or m["other"] != node)), None,
    )  # fmt: skip
    if elsewhere is None:
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "node_drift|collective_test_hangs",
        f"{v.summary}; a collective benchmark hangs on {node} while the same work runs on "
        "another node: its GPU-to-GPU path (driver, IOMMU, PCIe settings)",
        max(v.confidence, 0.7), culprits=[node], ranks=v.ranks,
        evidence=[hung, elsewhere, *v.evidence], kind=v.kind,
    )  # fmt: skip
