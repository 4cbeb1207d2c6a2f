"""Shared services (file systems, switches) and site-owned software: who is to blame.

attribution-labels.md tie-breakers 5 and 6. Each rule is exercised with real message formats:
the Linux NFS client's `nfs: server ... not responding` (fs/nfs), Lustre's `LustreError: 11-0`
(lustre/ptlrpc), CPython's import and OSError messages, mlx5's `Link DOWN`.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(job: str, nodes: list[str], node_logs: dict[str, str] | None = None) -> Attribution:
    logs = {
        host: _lines(text, f"dmesg_{host}.txt") for host, text in (node_logs or {}).items()
    }  # fmt: skip
    return attribute(Registry.default(), None, _lines(job), None, [], nodes, node_logs=logs)


# A venv on NFS /home: the import fails when the server stops answering (THUDM/slime#326).
VENV_IMPORT = (
    "0: Traceback (most recent call last):\n"
    '0:   File "/home/rt/runs/train.py", line 5, in <module>\n'
    "0:     import transformers\n"
    "0: ModuleNotFoundError: No module named 'transformers'\n"
    "srun: error: n001: task 0: Exited with exit code 1\n"
)
NFS_DOWN = "[Thu Jan 15 14:02:33 2026] nfs: server home01 not responding, still trying\n"


def test_an_import_error_while_nfs_was_lost_on_the_nodes_is_the_file_systems() -> None:
    a = _run(VENV_IMPORT, ["n001", "n002"], {"n001": NFS_DOWN, "n002": NFS_DOWN})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_an_import_error_with_no_file_system_evidence_stays_the_applications() -> None:
    a = _run(VENV_IMPORT, ["n001", "n002"])
    assert a.category == Category.APPLICATION
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_import_error_long_after_the_nfs_outage_stays_the_applications() -> None:
    dated = VENV_IMPORT.replace(
        "0: ModuleNotFoundError", "0: [2026-01-15 19:30:00] ModuleNotFoundError"
    )
    a = _run(dated, ["n001", "n002"], {"n001": NFS_DOWN, "n002": NFS_DOWN})
    assert a.category == Category.APPLICATION


# torch.save's write fails with ESTALE while an OST refuses the client's writes.
STALE_CKPT = (
    "[2018-05-15 18:14:02] step 120000 | loss 1.44 | saving checkpoint to /lustre/ckpt/s120000\n"
    "Traceback (most recent call last):\n"
    '  File "train.py", line 311, in save_ckpt\n'
    "    torch.save(state, tmp)\n"
    "OSError: [Errno 116] Stale file handle\n"
    "srun: error: c011: task 0: Exited with exit code 1\n"
)
OST_WRITE_FAILED = (
    "May 15 18:14:05 c011 kernel: LustreError: 11-0: lustre-OST0088-osc-ffff9c: operation "
    "ost_write to node 10.12.0.33@o2ib failed: rc = -116\n"
)


def test_a_one_node_jobs_stale_handle_while_its_lustre_client_lost_the_ost_is_shared() -> None:
    a = _run(STALE_CKPT, ["c011"], {"c011": OST_WRITE_FAILED})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_stale_handle_where_only_one_of_the_jobs_nodes_lost_lustre_is_not_shared() -> None:
    job = STALE_CKPT.replace("OSError", "1: OSError").replace("c011: task 0", "c012: task 1")
    a = _run(job, ["c011", "c012"], {"c012": OST_WRITE_FAILED.replace("c011", "c012")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["c012"])


# Four hosts' HCAs lose their links in the same second (mlx5_core's `Link DOWN`), their NCCL
# sends fail with IBV_WC_RETRY_EXC_ERR (NCCL net_ib.cc).
NODES4 = ["r1n01", "r1n02", "r1n03", "r1n04"]
IB_FAIL = "".join(
    f"[{host}] [rank{i * 8}]: {host}:3310:3510 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : "
    f"Got completion from peer 10.3.14.{i + 2}<40112> with status=IBV_WC_RETRY_EXC_ERR(12) "
    "opcode=0 len=0 vendor err 129 (Send)\n"
    for i, host in enumerate(NODES4)
)


def _link_down(second: int) -> str:
    return f"[19:02:{second:02d}] mlx5_core 0000:4b:00.0 ibp75s0: Link DOWN\n"


def test_links_of_several_nodes_down_in_the_same_second_are_their_switchs() -> None:
    logs = {host: _link_down(11) for host in NODES4}
    a = _run(IB_FAIL, NODES4, logs)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_large_jobs_few_pasted_kernel_logs_showing_the_same_second_are_the_switch() -> None:
    # Two of the four nodes' dmesg pasted, both down in the same second; the other two said
    # nothing of their own.
    logs = {host: _link_down(11) for host in NODES4[:2]}
    a = _run(IB_FAIL, NODES4, logs)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, [])


def test_one_pasted_kernel_log_cannot_say_switch() -> None:
    a = _run(IB_FAIL, NODES4, {NODES4[0]: _link_down(11)})
    assert a.culprit_nodes != []


def test_a_fabric_log_pasted_with_the_job_saying_the_leaf_went_down_names_no_node() -> None:
    # A UFM event log excerpt ("Switch is down: unreachable") beside scontrol's record.
    scheduler = (
        "# UFM event log excerpt (fabric management)\n"
        "2026-11-23T08:12:53 [CRITICAL] Switch ib-leaf-03 (guid 0xfc6a1c0300a9b8e0) Switch is "
        "down: unreachable\n"
    )
    a = attribute(
        Registry.default(), None, _lines(IB_FAIL), None, [], NODES4, node_logs={},
        scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_links_down_minutes_apart_are_each_nodes_own() -> None:
    logs = {host: _link_down(11 + 10 * i) for i, host in enumerate(NODES4)}
    a = _run(IB_FAIL, NODES4, logs)
    assert a.category == Category.HARDWARE_NETWORK
    assert a.culprit_nodes == NODES4


# PyTorch's `_check_driver` message when the CUDA runtime it loads needs a newer driver, and
# the CUDA runtime's cudaErrorInsufficientDriver text.
TOO_OLD = (
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11080). Please "
    "update your GPU driver by downloading and installing a new version from the URL: "
    "http://www.nvidia.com/Download/index.aspx"
)
INSUFFICIENT = (
    "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
)
NODES2 = ["g01", "g02"]


def _every_task(message: str, launch: str = "") -> str:
    return launch + "".join(
        f"{i}: {message}\nsrun: error: {host}: task {i}: Exited with exit code 1\n"
        for i, host in enumerate(NODES2)
    )


def test_the_sites_cuda_too_old_on_every_node_names_them_all_and_stops() -> None:
    # Only rank 0's message is whole; the others print its first sentence (as interleaved
    # output keeps it), which alone would name the first node srun reported.
    nodes = ["g01", "g02", "g03", "g04"]
    short = TOO_OLD.split(" Please", 1)[0]
    job = "+ module load cuda/12.4\n" + f"0: {TOO_OLD}\n"
    job += "".join(f"{i}: {short}\n" for i in range(1, 4))
    job += "".join(
        f"srun: error: {h}: task {i}: Exited with exit code 1\n" for i, h in enumerate(nodes)
    )
    a = _run(job, nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, nodes)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_cuda_runtime_too_new_in_the_jobs_own_container_is_the_applications() -> None:
    launch = "+ srun --container-image=$HOME/img/train-cu13.sqsh python train.py\n"
    a = _run(_every_task(INSUFFICIENT, launch), NODES2)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


# nv-fabricmanager's refusal (NVIDIA/gpu-operator#544) and CUDA's Error 802 (dstackai/dstack#2348).
FM_MISMATCH = (
    "Nov 30 23:10:02 {host} nv-fabricmanager[2201]: fabric manager NVIDIA GPU driver interface "
    "version 550.90.07 don't match with driver version 550.127.05.\n"
)
NOT_INITIALISED = "RuntimeError: CUDA error: system not yet initialized"


def test_a_fabric_manager_refusing_the_driver_on_every_node_names_them_all_and_stops() -> None:
    # No node list and one srun line: the nodes are the journals' hosts, every rank failed.
    nodes = ["g01", "g02", "g03"]
    logs = {host: FM_MISMATCH.format(host=host) for host in nodes}
    job = "".join(f"{t}: [rank{8 * t}]: {NOT_INITIALISED}\n" for t in range(3))
    job += "srun: error: g01: task 0: Exited with exit code 1\n"
    a = _run(job, [], logs)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, nodes)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_fabric_manager_refusing_the_driver_on_one_node_excludes_that_node() -> None:
    job = f"1: {NOT_INITIALISED}\nsrun: error: g02: task 1: Exited with exit code 1\n"
    a = _run(job, NODES2, {"g02": FM_MISMATCH.format(host="g02")})
    assert a.culprit_nodes == ["g02"]
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


# PyTorch's _lazy_init message inside a container that got no driver (apptainer/apptainer#1895).
NO_DRIVER = (
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
    "GPU and installed a driver from http://www.nvidia.com/Download/index.aspx"
)


def test_a_container_started_without_nv_finding_no_driver_is_the_applications() -> None:
    launch = "+ srun apptainer exec $HOME/containers/pt2410.sif torchrun train.py\n"
    a = _run(_every_task(NO_DRIVER, launch), NODES2)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_container_started_with_nv_finding_no_driver_stays_the_nodes() -> None:
    launch = "+ srun apptainer exec --nv $HOME/containers/pt2410.sif torchrun train.py\n"
    a = _run(_every_task(NO_DRIVER, launch), NODES2)
    assert a.category == Category.SYSTEM_SOFTWARE
