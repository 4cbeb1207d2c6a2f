"""A node's gres.conf binding its GPUs to cores on the other socket (resurgo.attribute.
node_diagnostics): gres.conf(5) `Cores=` against the CPU affinity `nvidia-smi topo -m` reports
(its "CPU Affinity" and "NUMA Affinity" columns). The node's configuration, so system_software."""

from __future__ import annotations

from resurgo.attribute.node_diagnostics import _causes, _gres_off_affinity
from resurgo.contracts import Category, LogLine

TOPO = [
    "GPU0\t X \tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPXB\t0-55,112-167\t0\t\tN/A",
    "GPU4\tNV18\tNV18\tNV18\tNV18\t X \tNV18\tNV18\tNV18\tSYS\t56-111,168-223\t1\t\tN/A",
]


def _lines(texts: list[str]) -> list[LogLine]:
    return [LogLine(source="node_n1.txt", line_no=i + 1, text=t) for i, t in enumerate(texts)]


def test_cores_on_the_far_socket_are_the_nodes_configuration() -> None:
    swapped = [
        "Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=56-111",
        "Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=0-55",
        *TOPO,
    ]
    found = _gres_off_affinity(_lines(swapped))
    assert found is not None and "nvidia[0-3]" in found.text
    assert (Category.SYSTEM_SOFTWARE, found) in _causes(_lines(swapped))


def test_matching_cores_are_fine() -> None:
    right = [
        "Name=gpu File=/dev/nvidia0 Cores=0-13",
        "Name=gpu Cores=56-69 File=/dev/nvidia4",
        *TOPO,
    ]
    assert _gres_off_affinity(_lines(right)) is None
    assert _gres_off_affinity(_lines(right[:2])) is None  # no topology: nothing to compare
