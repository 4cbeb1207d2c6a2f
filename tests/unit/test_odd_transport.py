"""The one node whose NCCL finds no IB device while its peers use theirs (NCCL 2.4's INFO
lines, as NVIDIA/nccl#258-style threads quote them)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import analyse_bundle, default_advice
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


def test_a_jobwide_slowdown_after_one_nodes_roce_gid_table_changed_is_that_node(
    tmp_path: Path,
) -> None:
    """NCCL 2.23's async-event warning (`Got async event : GID table change`,
    libibverbs' name for IBV_EVENT_GID_CHANGE) on one node as the iteration time jumps."""
    steps = [
        f"[2025-08-26 13:{k:02d}:10] iteration {100 + 10 * k:8d}/  50000 | elapsed time per iteration (ms): {1842.0 if k < 8 else 5283.0} | throughput per GPU (TFLOP/s/GPU): 301.0 |\n"
        for k in range(16)
    ]
    gid = [
        f"rx-103:6023{d}:6031{d} [{d}] transport/net_ib.cc:101 NCCL WARN NET/IB : bnxt_re{d}:1 Got async event : GID table change\n"
        for d in range(2)
    ]
    job = "# job still running at collection time\n" + "".join(steps[:8] + gid + steps[8:])
    (tmp_path / "job.log").write_text(job)
    (tmp_path / "scheduler.txt").write_text(
        "$ squeue -j 517620\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 517620 gpu gpt ann R 16:02 4 rx-[101-104]\n"
    )
    v = analyse_bundle(tmp_path).as_json()
    assert (v["kind"], v["category"], v["culprit_nodes"]) == (
        "straggler",
        "system_software",
        ["rx-103"],
    )
    (tmp_path / "job.log").write_text(job.replace("GID table change", "port active"))
    assert analyse_bundle(tmp_path).as_json()["culprit_nodes"] == []


LINKS = "$ ip -o link show | grep -E 'ens[0-9]+f[01]np'\n4: ens1f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu {mtu} qdisc mq state UP mode DEFAULT group default qlen 1000\n$ ibv_devinfo -d mlx5_0 | egrep 'state|mtu'\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n\t\t\tactive_mtu:\t\t{active} ({code})\n"
ASYNC = "rc-gpu15:30300:30374 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : local access violation work queue error\nsrun: error: rc-gpu15: task 1: Exited with exit code 1\n"


def test_a_node_whose_ports_run_a_smaller_mtu_than_its_peers_is_its_configuration() -> None:
    """iproute2's `ip -o link show` and ibv_devinfo's `active_mtu` in the nodes' own files."""
    logs = {
        "rc-gpu14": _lines(LINKS.format(mtu=4200, active=4096, code=5), "node_rc-gpu14.txt"),
        "rc-gpu15": _lines(LINKS.format(mtu=1500, active=1024, code=3), "node_rc-gpu15.txt"),
    }
    nodes = ["rc-gpu14", "rc-gpu15"]
    a = attribute(
        Registry.default(), None, _lines(ASYNC, "job.log"), None, [], nodes, node_logs=logs
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["rc-gpu15"])
    logs["rc-gpu15"] = _lines(LINKS.format(mtu=4200, active=4096, code=5), "node_rc-gpu15.txt")
    a = attribute(
        Registry.default(), None, _lines(ASYNC, "job.log"), None, [], nodes, node_logs=logs
    )
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["rc-gpu15"])


def test_the_node_whose_nccl_bootstraps_over_libvirts_bridge_is_its_configuration() -> None:
    """NCCL's `Bootstrap : Using virbr0:192.168.122.1<0>` (libvirt's default bridge, the same
    private address on every host) on one node, a real NIC on the other; the job hangs."""
    job = (
        "face-gpu1:2231:2231 [0] NCCL INFO Bootstrap : Using enp4s0:10.60.1.31<0>\n"
        "face-gpu2:51100:51100 [0] NCCL INFO Bootstrap : Using virbr0:192.168.122.1<0>\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600042 milliseconds before timing out.\n"
    )
    nodes = ["face-gpu1", "face-gpu2"]
    a = attribute(Registry.default(), None, _lines(job, "job.log"), None, [], nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["face-gpu2"])
    both = job.replace("virbr0:192.168.122.1", "enp4s0:10.60.1.32")
    assert (
        attribute(Registry.default(), None, _lines(both, "job.log"), None, [], nodes).culprit_nodes
        == []
    )
