"""NCCL out of /dev/shm on every node: the container's size for it, and whose setting that is.

Lines as NVIDIA/nccl#290 and #342 quote them (older NCCL's include/shm.h); Docker gives /dev/shm
64 MB unless `--shm-size` or `--ipc=host` says otherwise.
"""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu2-ru7", "gpu2-ru8"]


def _run(job: str, node_logs: dict[str, list[LogLine]] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES, node_logs=node_logs or {},
        scheduler_lines=[],
    )  # fmt: skip


FAILED = (
    "0: gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No "
    "space left on device\n"
    "1: gpu2-ru8:3306:3711 [2] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No "
    "space left on device\n"
    "0: [rank0]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/"
    "csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
    "srun: error: gpu2-ru7: task 0: Exited with exit code 1\n"
    "srun: error: gpu2-ru8: task 1: Exited with exit code 1\n"
)
LAUNCH = (
    "+ srun -l docker run --rm --runtime nvidia --net=host {opts}nvcr.io/nvidia/pytorch:24.01-py3 "
    "torchrun --nnodes=2 --nproc_per_node=4 /home/ap/train.py\n"
    "0: NOTE: The SHMEM allocation limit is set to the default of 64MB.  This may be\n"
    "0:    docker run --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 ...\n"
)


def test_the_jobs_own_container_without_shm_size_stops() -> None:
    a = _run(LAUNCH.format(opts="") + FAILED)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_container_given_the_hosts_ipc_is_not_blamed_for_its_shm() -> None:
    a = _run(LAUNCH.format(opts="--ipc=host ") + FAILED)
    assert "--shm-size" not in a.summary


def test_the_sites_container_template_names_every_node_and_stops() -> None:
    note = (
        "# site note: every job step runs inside the site-managed container runtime; its "
        "template mounts tmpfs /dev/shm with size=64m; users cannot override it\n"
    )
    a = _run(note + FAILED)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, NODES)
    assert default_advice(a).kind == AdviceKind.STOP


def test_one_nodes_shm_alone_is_that_nodes_state() -> None:
    one = "".join(x + "\n" for x in FAILED.splitlines() if "gpu2-ru8:3306" not in x)
    a = _run(LAUNCH.format(opts="") + one)
    assert default_advice(a).kind != AdviceKind.STOP


def test_a_small_shm_size_the_jobs_own_container_sets_is_its_own_on_one_node() -> None:
    """PyTorch's DataLoader bus error (torch/utils/data/_utils/signal_handling.py) in a
    container the job starts with `--shm-size=64m`: the size is the job's choice."""
    job = (
        "+ srun docker run --rm --gpus all --ipc=private --shm-size=64m -v /raid/data:/data "
        "det-train:1.10 torchrun --nproc_per_node=8 /ws/train.py --workers 8\n"
        "[12/14 16:10:16] epoch 0 iter 200/5860 loss 2.233 lr 0.00100 data 0.021s\n"
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).\n"
        "RuntimeError: DataLoader worker (pid 417) is killed by signal: Bus error. It is possible "
        "that dataloader's workers are out of shared memory. Please try to raise your shared "
        "memory limit.\n"
    )
    a = attribute(Registry.default(), None, _lines(job), None, [], ["dgx-b-04"], scheduler_lines=[])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "--shm-size=64m" in a.summary
    assert default_advice(a).kind == AdviceKind.STOP
    host = attribute(
        Registry.default(), None, _lines(job.replace("--ipc=private", "--ipc=host")), None, [],
        ["dgx-b-04"], scheduler_lines=[],
    )  # fmt: skip
    assert "--shm-size=64m" not in host.summary


# A one-node job whose script starts its own container (PaddlePaddle's launcher inside it): NCCL
# prints the container's host name, Docker's 12 hex digits of its id, not the node's.
PADDLE = (
    "# sbatch -N 1 --gres=gpu:4 run_paddle.sh ; the script starts the user's own docker container:\n"
    "#   docker run --gpus all --rm -v $PWD:/work paddle-dev:2.5-cuda11.2 python -m paddle.distributed.launch --gpus 0,1,2,3 train.py\n"
    "# SLURM_JOB_ID=880231 SLURM_JOB_NODELIST=a6000-n02\n"
    "196d1db4e5fe:15374:15374 [3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
    "196d1db4e5fe:15374:15374 [3] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-a6fd15028d324d0c-0-3-0 (size 9637888)\n"
    "srun: error: a6000-n02: task 0: Exited with exit code 1\n"
)


def _bundle(job: str) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], [], node_logs={}, scheduler_lines=[]
    )


def test_the_jobs_own_docker_run_without_shm_options_on_one_node_is_its_own() -> None:
    a = _bundle(PADDLE)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), a.summary


def test_a_container_host_name_is_no_node_to_exclude() -> None:
    # (the same lines from a container given the host's IPC: not the size; still no node)
    a = _bundle(PADDLE.replace("docker run --gpus all", "docker run --ipc=host --gpus all"))
    assert "196d1db4e5fe" not in a.culprit_nodes, a.summary
