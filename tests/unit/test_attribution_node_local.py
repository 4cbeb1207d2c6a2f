"""Node-local software faults are named with their node; shared outages blame no node."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]


def _run(job: str, node_logs: dict[str, str] | None = None) -> Attribution:
    logs = {h: _lines(t, f"journal_{h}.txt") for h, t in (node_logs or {}).items()}
    return attribute(Registry.default(), None, _lines(job), None, [], NODES, node_logs=logs)


def test_links_down_on_two_nodes_at_the_same_second_are_a_switch_not_the_nodes() -> None:
    down = "Sep 09 14:02:11 {h} kernel: mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link DOWN"
    job = (
        "0: [rank0]: RuntimeError: NCCL error: remote process exited or there was a network error\n"
        "srun: error: gpu01: task 0: Exited with exit code 1\n"
        "srun: error: gpu03: task 2: Exited with exit code 1"
    )
    a = _run(job, {"gpu01": down.format(h="gpu01"), "gpu03": down.format(h="gpu03")})
    assert a.category == Category.HARDWARE_NETWORK
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_link_down_on_one_node_still_names_it() -> None:
    down = "Sep 09 14:02:11 gpu03 kernel: mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link DOWN"
    job = "srun: error: gpu03: task 2: Exited with exit code 1"
    a = _run(job, {"gpu03": down})
    assert a.culprit_nodes == ["gpu03"]


def test_a_full_tmp_on_one_nodes_ranks_names_that_node() -> None:
    err = "OSError: [Errno 28] No space left on device: '/tmp/torchinductor_u/fx_graph_cache/k7'"
    job = "\n".join(f"2: [rank{r}]: {err}" for r in (8, 9, 10)) + (
        "\nsrun: error: gpu03: task 2: Exited with exit code 1"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03"])


def test_the_node_with_the_odd_nccl_version_is_named_when_every_rank_reports_it() -> None:
    version = {0: "2.21.5", 1: "2.21.5", 2: "2.23.4", 3: "2.21.5"}
    job = "\n".join(
        f"{t}: gpu0{t + 1}:5011{t}:5011{t} [0] NCCL INFO NCCL version {v}+cuda12.4"
        for t, v in version.items()
    )
    job += "\n" + "\n".join(
        f"{t}: gpu0{t + 1}:5011{t}:5030{t} [0] init.cc:1043 NCCL WARN Mismatched NCCL version "
        f"detected : rank {2 if t != 2 else 0} version {22304 if t != 2 else 22105} rank {t} "
        f"version {22105 if t != 2 else 22304}"
        for t in range(4)
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03"])


def test_nccl_finding_no_socket_interface_names_those_nodes() -> None:
    job = (
        "0: gpu01:40112:40112 [0] NCCL INFO Bootstrap : Using ib0:10.30.1.11<0>\n"
        "1: gpu02:39877:39877 [0] NCCL INFO Bootstrap : Using ib0:10.30.1.12<0>\n"
        "2: gpu03:41122:41122 [0] bootstrap.cc:127 NCCL WARN Bootstrap : no socket interface "
        "found\n"
        "3: gpu04:41007:41007 [0] bootstrap.cc:127 NCCL WARN Bootstrap : no socket interface "
        "found\n"
        "2: [rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2006, "
        "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\n"
        "srun: error: gpu03: task 2: Exited with exit code 1"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03", "gpu04"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_driver_library_mismatch_in_a_nodes_kernel_log_names_it() -> None:
    job = (
        "1: [rank1]: RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some "
        "cuda functions before calling NumCudaDevices() that might have already set an error? "
        "Error 804: forward compatibility was attempted on non supported HW\n"
        "srun: error: gpu02: task 1: Exited with exit code 1"
    )
    log = (
        "Oct 14 07:02:19 gpu02 kernel: NVRM: API mismatch: the client has the version 550.127.05, "
        "but"
    )
    a = _run(job, {"gpu02": log})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])


def test_a_file_system_outage_seen_from_every_node_excludes_none() -> None:
    lost = (
        "[Tue Mar 18 04:10:1{s} 2025] Lustre: scratch-OST002a-osc-ffff9c2e8b4d2328: Connection to "
        "scratch-OST002a (at 10.100.4.18@o2ib) was lost; in progress operations using this "
        "service will wait for recovery to complete"
    )
    job = (
        "0: iteration 36000 | loss 2.01\n"
        "srun: error: gpu01: tasks 0: Aborted (core dumped)\n"
        "slurmstepd: error: *** JOB 5 ON gpu01 CANCELLED AT 2025-03-18T06:00:00 DUE TO TIME "
        "LIMIT ***"
    )
    a = _run(job, {h: lost.format(s=i) for i, h in enumerate(NODES)})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_pipeline_stages_waiting_in_send_and_recv_are_not_a_collective_mismatch() -> None:
    work = (
        "[rank{r}]:[E0714 09:25:57.741549258 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=57123, OpType={op}, NumelIn=4096, "
        "NumelOut=4096, Timeout(ms)=600000) ran for 600096 milliseconds before timing out."
    )
    job = "\n".join(work.format(r=r, op="SEND" if r % 2 else "RECV") for r in range(4))
    a = _run(job)
    assert a.category != Category.APPLICATION


def test_one_rank_timing_out_one_all_reduce_ahead_of_the_others_is_the_jobs_code() -> None:
    """ProcessGroupNCCL's watchdog lines: rank 13 at SeqNum 41221 while the others wait at
    41220 in the same all-reduce (a rank-local skip of one backward)."""
    work = (
        "[rank{r}]:[E609 04:49:15.102123294 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        "NumelIn=26214400, NumelOut=26214400, Timeout(ms)=600000) ran for 600083 milliseconds "
        "before timing out."
    )
    ahead = "\n".join(work.format(r=r, seq=41221 if r == 13 else 41220) for r in (0, 4, 9, 13, 15))
    a = _run(ahead)
    assert (a.category, a.culprit_ranks) == (Category.APPLICATION, [13])
    assert default_advice(a).kind == AdviceKind.STOP
    even = "\n".join(work.format(r=r, seq=41220) for r in (0, 4, 9, 13, 15))
    assert _run(even).category != Category.APPLICATION


# NCCL's misc/ibvwrap.cc warning as four nodes print it when their queue pairs to one peer's
# RoCE address fail; the peer's NetworkManager journal shows the DHCP lease that moved it.
_QP = (
    "{t}: gpu0{n}:4112{t}:4138{t} [3] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with "
    "110 Connection timed out, on dev mlx5_3:1, curr state INIT, next state RTR, local GID index "
    "3, local GID ::ffff:10.60.3.1{n}, remote GID ::ffff:10.60.7.44"
)
_LEASE = (
    "Dec 02 06:51:12 gpu05 NetworkManager[2201]: <info>  [1764658272.1184] dhcp4 (ens41np0): "
    "state changed new lease, address=10.60.7.44"
)


def _qp_job() -> str:
    lines = [_QP.format(t=t, n=t + 1) for t in range(4)]
    return "\n".join([*lines, "srun: error: gpu01: task 0: Exited with exit code 1"])


def test_the_peer_address_every_failing_connection_ends_at_is_named_by_the_node_holding_it() -> (
    None
):
    logs = {"gpu05": _lines(_LEASE, "journal_gpu05.txt")}
    a = attribute(Registry.default(), None, _lines(_qp_job()), None, [], [], node_logs=logs)
    assert a.culprit_nodes == ["gpu05"]


def test_an_address_no_node_file_holds_is_never_named_as_a_node() -> None:
    a = attribute(Registry.default(), None, _lines(_qp_job()), None, [], [], node_logs={})
    assert "10.60.7.44" not in a.culprit_nodes
