"""A node listing fewer GPUs than the job's other nodes lost a board: its GPU, left out. Lines
as nvidia-smi (table and -L) and an OpenMM rank print them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

JOB = """\
[gpu-2-04] rank 3: step 100 energy -1234.5
[gpu-2-05] rank 7: Exception: Error initializing CUDA: CUDA_ERROR_INVALID_DEVICE (101) at /builds/openmm/platforms/cuda/src/CudaContext.cpp:149
srun: error: gpu-2-05: task 7: Exited with exit code 1
"""
ROWS = "".join(
    f"|   {i}  GeForce GTX 680     Off  | 0000:{bus}:00.0     N/A |                  N/A |\n"
    for i, bus in enumerate(["03", "04", "83", "84"])
)
LIST = "".join(f"GPU {i}: GeForce GTX 680\n" for i in range(4))
NODES = ["gpu-2-04", "gpu-2-05"]


def test_a_node_listing_fewer_gpus_than_its_peer_lost_one() -> None:
    three = "$ nvidia-smi\n" + "".join(ROWS.splitlines(keepends=True)[:3])
    a = attribute_text(
        JOB, NODES, {"node_gpu-2-05": three, "node_gpu-2-04": "$ nvidia-smi -L\n" + LIST}
    )
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-2-05"]), a.summary
    assert first_action(a) == "requeue_excluding_nodes"


def test_nodes_listing_the_same_gpus_say_nothing_of_a_board() -> None:
    a = attribute_text(JOB, NODES, {"node_gpu-2-05": ROWS, "node_gpu-2-04": LIST})
    assert a.category != Category.HARDWARE_GPU, a.summary


def test_one_nodes_listing_alone_has_nothing_to_compare_with() -> None:
    three = "".join(ROWS.splitlines(keepends=True)[:3])
    a = attribute_text(JOB, NODES, {"node_gpu-2-05": three})
    assert a.category != Category.HARDWARE_GPU, a.summary
