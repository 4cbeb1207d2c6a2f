"""The one node whose NCCL finds no IB device while its peers use theirs (NCCL 2.4's INFO
lines, as NVIDIA/nccl#258-style threads quote them)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["cn143", "cn144", "cn145", "cn146"]


def _job(odd: str) -> str:
    out = []
    for task, host in enumerate(NODES):
        if host == odd:
            out += [
                f"{task}: {host}:31014:31014 [0] NCCL INFO NET/IB : No device found.\n",
                f"{task}: {host}:31014:31014 [0] NCCL INFO NET/Socket : 1 interfaces found\n",
            ]
        else:
            out.append(
                f"{task}: {host}:31000:31000 [0] NCCL INFO NET/IB : Using interface eth0 for sideband communication\n"
            )
    out += [
        "2: cn145:31014:31066 [0] include/socket.h:403 NCCL WARN Connect to 10.141.0.146<46851> failed : Connection refused\n",
        *(
            f"{t}: RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, unhandled system error, NCCL version 2.4.8\n"
            for t in range(4)
        ),
        "srun: error: cn[143-146]: tasks 0-3: Exited with exit code 1\n",
    ]
    return "".join(out)


def test_the_one_node_whose_nccl_finds_no_ib_device_is_that_nodes_software() -> None:
    a = attribute(Registry.default(), None, _lines(_job("cn145"), "job.log"), None, [], NODES)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["cn145"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_every_node_using_ib_names_no_node_for_the_same_error() -> None:
    a = attribute(Registry.default(), None, _lines(_job(""), "job.log"), None, [], NODES)
    assert a.culprit_nodes == []
