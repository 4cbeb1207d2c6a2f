"""System-software and network culprits: a site setting broken on every node, a node-local
software fault only that node's files show, a shared switch seen from every node, and a JAX
start-up barrier waiting for processes the launch never started. Each rule with a real line."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(
    job: str, node_files: dict[str, str] | None = None, nodes: list[str] | None = None
) -> Attribution:
    logs = {h: _lines(t, name) for name, (h, t) in _named(node_files or {}).items()}
    return attribute(Registry.default(), None, _lines(job), None, [], nodes or [], node_logs=logs)


def _named(files: dict[str, str]) -> dict[str, tuple[str, str]]:
    # `journal_h100-x-09.txt` -> ("h100-x-09", text)
    return {name: (name.split("_", 1)[1].rsplit(".", 1)[0], t) for name, t in files.items()}


def _action(a: Attribution) -> AdviceKind:
    return default_advice(a).kind


# NCCL's bootstrap (src/misc/socket.cc, NVIDIA/nccl-tests#219) with NCCL_SOCKET_IFNAME from a
# site-managed /etc/nccl.conf: every process prints its own host (`host:pid:tid [dev]`), none
# carries an srun label, and torch wraps it in a generic DistBackendError.
NO_INTERFACE = """\
# job env has no NCCL_* variables; /etc/nccl.conf (site config management) sets NCCL_SOCKET_IFNAME
{lines}srun: error: gpu-p01: task 0: Exited with exit code 1
srun: error: gpu-p02: task 1: Exited with exit code 1
srun: error: gpu-p03: task 2: Exited with exit code 1
"""
_HOST_LINES = """\
{h}:20331:20331 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0
{h}:20331:20331 [0] misc/socket.cc:496 NCCL WARN Bootstrap : no socket interface found
{h}:20331:20331 [0] NCCL INFO init.cc:1869 -> 3
[rank{r}]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/\
c10d/ProcessGroupNCCL.cpp:3690, internal error - please report this issue to the NCCL developers, \
NCCL version 2.23.4
"""


def test_a_site_interface_setting_every_nodes_nccl_prints_names_them_all_and_stops() -> None:
    hosts = ["gpu-p01", "gpu-p02", "gpu-p03"]
    job = NO_INTERFACE.format(
        lines="".join(_HOST_LINES.format(h=h, r=4 * i) for i, h in enumerate(hosts))
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, hosts)
    assert _action(a) == AdviceKind.STOP


def test_the_same_warning_from_some_nodes_only_is_not_everywhere() -> None:
    job = NO_INTERFACE.format(lines=_HOST_LINES.format(h="gpu-p02", r=4))
    a = _run(job)
    assert _action(a) != AdviceKind.STOP


# torch/_inductor codecache writing to node-local /tmp (pytorch/pytorch#16417's ENOSPC), printed
# by the eight ranks of one node; srun terminates the other nodes' tasks.
LOCAL_TMP_FULL = "".join(
    f"[rank{r}]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
    f"[rank{r}]: OSError: [Errno 28] No space left on device: "
    f"'/tmp/torchinductor_rp/triton/0/XK2ABF/triton_.cubin.tmp.pid_310{r:02d}'\n"
    for r in range(8, 16)
) + (
    "srun: error: gx-11: task 1: Exited with exit code 1\n"
    "srun: error: gx-[10,12]: tasks 0,2: Terminated\n"
)


def test_one_nodes_ranks_filling_its_local_disk_exclude_that_node() -> None:
    a = _run(LOCAL_TMP_FULL)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gx-11"])
    assert _action(a) == AdviceKind.REQUEUE_EXCLUDING


# CUDA error 802 (cudaErrorSystemNotReady) on one node's ranks; that node's journal shows
# nvidia-fabricmanager failing on a driver/version mismatch (NVIDIA Fabric Manager user guide;
# pytorch/pytorch#35710), the others started it.
CUDA_802 = "".join(
    f"[rank{r}]: RuntimeError: CUDA error: system not yet initialized\n" for r in range(16, 24)
) + (
    "srun: error: h100-x-09: task 2: Exited with exit code 1\n"
    "srun: error: h100-x-[07-08,10]: tasks 0-1,3: Exited with exit code 1\n"
)
FM_STARTED = "Dec 04 21:00:00 {h} systemd[1]: Started NVIDIA fabric manager service.\n"
FM_FAILED = """\
Dec 04 21:00:02 h100-x-09 nv-fabricmanager[3311]: fabric manager NVIDIA GPU driver interface \
version 550.90.07 don't match with driver version 550.127.05. Please update with matching NVIDIA \
driver package.
Dec 04 21:00:02 h100-x-09 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.
"""


def test_fabric_manager_failing_on_one_node_names_that_node() -> None:
    files = {f"journal_h100-x-{n}.txt": FM_STARTED.format(h=f"h100-x-{n}") for n in ("07", "08")}
    files["journal_h100-x-09.txt"] = FM_FAILED
    a = _run(CUDA_802, files)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["h100-x-09"])
    assert _action(a) == AdviceKind.REQUEUE_EXCLUDING


def test_fabric_manager_failing_on_every_node_excludes_none() -> None:
    files = {
        f"journal_h100-x-{n}.txt": FM_FAILED.replace("h100-x-09", f"h100-x-{n}")
        for n in ("07", "08", "09", "10")
    }
    a = _run(CUDA_802, files)
    assert _action(a) != AdviceKind.REQUEUE_EXCLUDING


# NCCL 2.19+ prints the numeric ibv_wc_status (transport/net_ib.cc `status=%d opcode=%d len=%d
# vendor err %d`; 12 = IBV_WC_RETRY_EXC_ERR, NVIDIA/nccl#1814). Every node's ports dropped
# together: the leaf switch they share, not one node.
def _completion(host: str, rank: int, peer: str) -> str:
    return (
        f"{host}:54899:55810 [0] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from "
        f"peer {peer}<59719> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
        f"fe80::a288:c2ff:fe3b:6457 remoteGids::ffff:{peer}\n"
    )


RACK = [f"rack7-gpu0{i}" for i in range(1, 5)]
REMOTE_ERROR = (
    "[rank{r}]:[E1030 16:00:04.274596758 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) "
    "Rank {r}] Process group watchdog thread terminated with exception: NCCL error: remote process "
    "exited or there was a network error, NCCL version 2.21.5\n"
)


def test_ib_retries_exhausted_on_every_node_at_once_is_the_shared_fabric() -> None:
    job = "".join(
        _completion(h, 8 * i, f"10.1.7.{11 + (i + 1) % 4}") + REMOTE_ERROR.format(r=8 * i)
        for i, h in enumerate(RACK)
    ) + "".join(
        f"srun: error: {h}: task {i}: Exited with exit code 1\n" for i, h in enumerate(RACK)
    )
    a = _run(job, nodes=RACK)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, [])
    assert _action(a) == AdviceKind.REQUEUE


def test_a_flushed_queue_pair_is_not_a_network_fault() -> None:
    # status=5 (IBV_WC_WR_FLUSH_ERR): the queue pair was already in error (its GPU fell off).
    line = _completion("rack7-gpu01", 0, "10.1.7.12").replace("status=12", "status=5")
    assert not [m for m in Registry.default().scan(line) if m.id == "nccl_ib_completion_error"]


WATCHDOG = (
    "{h}: [rank{r}]:[E1112 07:46:10.654285 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=120455, OpType=ALLREDUCE, NumelIn=134217728, "
    "NumelOut=134217728, Timeout(ms)=600000) ran for 600057 milliseconds before timing out.\n"
)
LINK_DOWN = "[Nov12 07:35:52] mlx5_core 0000:5e:00.0 ibp94s0: Link down\n"


def test_retries_exhausted_then_every_collective_timing_out_is_a_hang() -> None:
    nodes = ["dgx-h-022", "dgx-h-023", "dgx-h-024"]
    job = (
        _completion("dgx-h-024", 16, "10.33.1.23")
        + "".join(WATCHDOG.format(h=h, r=8 * i) for i, h in enumerate(nodes))
        + "".join(f"srun: error: {h}: task {i}: Aborted\n" for i, h in enumerate(nodes))
    )
    a = _run(job, {"dmesg_dgx-h-023.txt": LINK_DOWN}, nodes=nodes)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.HARDWARE_NETWORK, ["dgx-h-023"],
    )  # fmt: skip


# NetworkManager replacing a RoCE node's DHCP address (its GID with it): the peers' retries
# exhausted are that node's software, not a link (NCCL troubleshooting: RoCE GID index).
DHCP = (
    "Oct 09 03:12:38 gpu-eth-09 NetworkManager[1702]: <info>  [1728443558.4490] device "
    "(ens1f0np0): DHCPv4: address 10.40.3.57 removed\n"
)


def test_retries_exhausted_toward_a_node_whose_address_changed_is_its_software() -> None:
    nodes = ["gpu-eth-08", "gpu-eth-09", "gpu-eth-10"]
    job = (
        _completion("gpu-eth-08", 8, "10.40.3.57")
        + _completion("gpu-eth-10", 16, "10.40.3.57")
        + "".join(REMOTE_ERROR.format(r=8 * i) for i in range(3))
        + "".join(f"srun: error: {h}: task {i}: Exited with exit code 1\n"
                  for i, h in enumerate(nodes))
    )  # fmt: skip
    a = _run(job, {"journal_gpu-eth-09.txt": DHCP}, nodes=nodes)
    assert a.category == Category.SYSTEM_SOFTWARE


# jax.distributed.initialize(num_processes=8) under 4 Slurm tasks: the coordination service's
# start-up barrier times out naming the processes never launched (ayaka14732/llama-2-jax#20).
JAX = """\
# sbatch --nodes=4 --ntasks-per-node=1 --gpus-per-node=8
{barriers}srun: error: gh-0104: task 0: Exited with exit code 1
srun: error: gh-0105: task 1: Exited with exit code 1
srun: error: gh-0106: task 2: Exited with exit code 1
srun: error: gh-0107: task 3: Exited with exit code 1
"""
_BARRIER = (
    "{t}: jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
    "Id: PjRT_Client_Connect. Timed out task names:\n"
)


def _jax(missing: list[int]) -> str:
    names = "".join(f"{{t}}: /job:jax_worker/replica:0/task:{m}\n" for m in missing)
    return JAX.format(barriers="".join((_BARRIER + names).format(t=t) for t in range(4)))


def test_jax_waiting_for_processes_never_launched_is_the_jobs_arguments() -> None:
    a = _run(_jax([4, 5, 6, 7]))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert _action(a) == AdviceKind.STOP


def test_jax_waiting_for_a_launched_process_is_not_the_jobs_count() -> None:
    a = _run(_jax([2]))
    assert _action(a) != AdviceKind.STOP


# Newer XLA (pjrt/distributed/client.cc) counts who reached the barrier before naming some of
# the missing ones: num_processes=4 under 2 Slurm tasks.
JAX_NEWER = """\
2026-11-30 15:25:02.337182: E external/xla/xla/pjrt/distributed/client.cc:80] Failed to connect \
to distributed JAX controller: DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect. \
This usually happens because a task triggered the barrier too early or too slowly.
# of tasks that reached the barrier: 2/4.
The first task at the barrier: /job:jax_worker/replica:0/task:0. Some timed out task names:
/job:jax_worker/replica:0/task:2
/job:jax_worker/replica:0/task:3
srun: error: jx-h001: task 0: Exited with exit code 1
srun: error: jx-h002: task 1: Exited with exit code 1
"""


def test_jax_newer_barrier_report_of_processes_never_launched_is_the_jobs() -> None:
    a = _run(JAX_NEWER)
    assert (a.category, _action(a)) == (Category.APPLICATION, AdviceKind.STOP)


# CUDA error 803 (cudaErrorSystemDriverMismatch, CUDA Runtime API) from torch's device count.
E803 = (
    "{t}: RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
    "functions before calling NumCudaDevices() that might have already set an error? Error 803: "
    "system has unsupported display driver / cuda driver combination\n"
)
P5 = ["p5-a1", "p5-a2", "p5-a3"]


def test_a_driver_mismatch_on_every_node_of_a_site_image_stops() -> None:
    job = "".join(
        E803.format(t=i) + f"srun: error: {h}: task {i}: Exited with exit code 1\n"
        for i, h in enumerate(P5)
    )
    a = _run(job, nodes=P5)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, P5)
    assert _action(a) == AdviceKind.STOP


def test_a_driver_mismatch_on_one_node_excludes_it() -> None:
    job = E803.format(t=1) + "srun: error: p5-a2: task 1: Exited with exit code 1\n"
    a = _run(job, nodes=P5)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["p5-a2"])
    assert _action(a) == AdviceKind.REQUEUE_EXCLUDING
