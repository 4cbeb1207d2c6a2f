"""Who owns the NCCL transport setting behind a generic NCCL failure, and which one node's
software differs from its peers'. Lines as NCCL, PyTorch and srun print them (issues cited)."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu01", "gpu02", "gpu03"]


def _run(job: str, nodes: list[str] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES if nodes is None else nodes
    )


# NVIDIA/nccl-tests#227 (`ibvwrap.c:160 NCCL WARN Call to ibv_modify_qp failed with error
# Connection timed out`), NVIDIA/nccl#1657 (`NCCL_IB_GID_INDEX set by environment to 0.`, then
# `NCCL error: unhandled system error`).
GID_FAILURE = """\
gpu01:7712:7800 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 0.
gpu01:7712:7800 [0] misc/ibvwrap.cc:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out
gpu02:7601:7690 [0] misc/ibvwrap.cc:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out
gpu03:7655:7701 [0] misc/ibvwrap.cc:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out
[rank0]: torch.distributed.DistBackendError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
"""  # noqa: E501


def test_a_gid_index_the_job_script_exports_is_the_jobs_configuration() -> None:
    a = _run("+ export NCCL_IB_GID_INDEX=0\n" + GID_FAILURE)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_operators_note_that_the_job_script_sets_it_is_ownership_too() -> None:
    a = _run("# job script: export NCCL_IB_GID_INDEX=0 ; site default is 3\n" + GID_FAILURE)
    assert a.category == Category.APPLICATION


def test_a_gid_index_the_site_prolog_exports_is_not_the_jobs() -> None:
    note = "# site task prolog /etc/slurm/prolog.d/nccl.sh exports NCCL_IB_GID_INDEX=0\n"
    a = _run(note + GID_FAILURE)
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


def test_nccls_set_by_environment_line_alone_is_no_ownership() -> None:
    # (NCCL loads /etc/nccl.conf into the environment: the line says the value, not its owner.)
    a = _run(GID_FAILURE)
    assert a.category != Category.APPLICATION


def test_the_job_exporting_a_setting_the_failure_is_not_about_is_no_ownership() -> None:
    a = _run("+ export NCCL_SOCKET_IFNAME=ib0\n" + GID_FAILURE)
    assert a.category != Category.APPLICATION


# NVIDIA/nccl#331: NCCL_COMM_ID set inside a bridge-mode Docker container.
COMM_ID_FAILURE = """\
e82c50601d13:213:213 [0] include/socket.h:197 NCCL WARN Net : No interface found in the same subnet as remote address 192.168.0.91<27030>
e82c50601d13:213:213 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.3<0>
e82c50601d13:213:213 [0] include/socket.h:333 NCCL WARN Call to bind failed : Cannot assign requested address
e82c50601d13:213:213 [0] NCCL INFO bootstrap.cc:91 -> 2
RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:400, unhandled system error, NCCL version 2.4.8
"""  # noqa: E501


def test_a_bootstrap_address_the_job_script_exports_is_the_jobs_configuration() -> None:
    note = "# job script exports NCCL_COMM_ID=192.168.0.91:27030, container in bridge mode\n"
    a = _run(COMM_ID_FAILURE + note, nodes=[])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_same_bootstrap_failure_without_the_jobs_setting_is_not_the_application() -> None:
    a = _run(COMM_ID_FAILURE, nodes=[])
    assert a.category != Category.APPLICATION


# NVIDIA/nccl#286: NCCL versions must match across nodes; NCCL prints `NCCL version X+cudaY`.
def _mixed(odd: str) -> str:
    return (
        "gpu01:4411:4411 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
        "gpu02:9921:9921 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
        f"gpu03:7702:7702 [0] NCCL INFO NCCL version {odd}\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
        "unhandled system error, NCCL version 2.18.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error.\n"
    )


def test_the_one_node_loading_another_nccl_is_its_software_and_is_named() -> None:
    a = _run(_mixed("2.14.3+cuda11.7"))
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_same_nccl_everywhere_names_no_node() -> None:
    a = _run(_mixed("2.18.3+cuda12.1"))
    assert a.culprit_nodes == []


# BasicSR#737 / PyTorch: `The NVIDIA driver on your system is too old (found version 11040)`;
# torch's store client: `The client socket has timed out after 900s while trying to connect`.
STORE_WAIT = (
    "{h}: torch.distributed.DistNetworkError: The client socket has timed out after 900s "
    "while trying to connect to (gpu00, 29500).\n"
)
TOO_OLD = (
    "{h}: RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
    "Please update your GPU driver.\n"
)


def test_the_one_node_whose_driver_is_too_old_is_named() -> None:
    job = STORE_WAIT.format(h="gpu01") + STORE_WAIT.format(h="gpu03") + TOO_OLD.format(h="gpu02")
    job += "srun: error: gpu02: task 1: Exited with exit code 1\n"
    a = _run(job, nodes=[])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_driver_too_old_on_every_node_is_no_odd_node_and_no_retry_helps() -> None:
    # (attribution-labels.md: site software broken on every node leaves nothing to exclude.)
    job = "".join(TOO_OLD.format(h=h) for h in NODES)
    job += "".join(
        f"srun: error: {h}: task {i}: Exited with exit code 1\n" for i, h in enumerate(NODES)
    )
    a = _run(job, nodes=[])
    assert "only" not in a.summary  # (not this module's odd-node finding)
    assert default_advice(a).kind == AdviceKind.STOP


# NVIDIA/nccl-tests#185: `misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error
# Network is unreachable`, printed by one node's ranks only.
ONE_NODE_QP = """\
gpu03:5101:5190 [1] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable
gpu03:5101:5190 [1] NCCL INFO transport/net_ib.cc:579 -> 2
[rank17]: torch.distributed.DistBackendError: NCCL error: unhandled system error, NCCL version 2.21.5
srun: error: gpu03: task 2: Exited with exit code 1
"""  # noqa: E501


def test_one_nodes_own_queue_pairs_failing_names_it_even_with_the_jobs_setting() -> None:
    # (The same job script runs on every node; only one node's state differs.)
    a = _run("+ export NCCL_IB_GID_INDEX=3\n" + ONE_NODE_QP)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING
