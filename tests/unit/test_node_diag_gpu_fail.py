"""A node's own GPU diagnostics (node_<host>.txt) decide a failure the job's output alone would
give to the application.

Formats (public sources): `dcgmi diag -r 2/3` tables, where a test some GPUs pass lists the
failing GPU on the row below (stas00/ml-engineering compute/accelerator/nvidia/debug.md,
`| GPU Memory | Pass - GPUs: 1, ... |` then `|  | Fail - GPU: 0 |`); Megatron-LM's
`check_for_nan_in_grad` assertion (megatron/core/distributed/param_and_grad_buffer.py).
attribution-labels.md: silent data corruption confirmed by a rerun check is hardware_gpu.
"""

from __future__ import annotations

from resurgo.attribute.node_patterns import node_registry
from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu001", "gpu002", "gpu003", "gpu004", "gpu005", "gpu006", "gpu007", "gpu008"]
NAN = """\
[rank34]: Traceback (most recent call last):
[rank34]:   File "/opt/megatron-lm/megatron/core/distributed/param_and_grad_buffer.py", line 167, \
in check_for_nan_in_grad
[rank34]:     assert not norm_is_nan, (
[rank34]: AssertionError: Rank 34: found NaN in local grad norm in backward pass before \
data-parallel communication collective. Device: 2, node: gpu005
srun: error: gpu005: tasks 32-39: Exited with exit code 1
"""
DIAG = """\
$ dcgmi diag -r 3
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
| Diagnostic                | Pass - GPUs: 0, 1, 3, 4, 5, 6, 7               |
|                           | Fail - GPU: 2                                  |
| Warning                   | GPU 2 Error using CUDA API cudaMemcpy          |
"""


def _run(node_logs: dict[str, str]) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in node_logs.items()}
    return attribute(
        Registry.default(), None, _lines(NAN, "job.log"), None, [], NODES, node_logs=logs
    )


def test_the_node_patterns_examples_match_and_near_misses_do_not() -> None:
    node_registry().check_examples()


def test_a_gpu_failing_dcgm_diag_on_the_nan_ranks_node_is_the_gpu() -> None:
    a = _run({"gpu005": DIAG})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu005"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_diag_every_gpu_passes_leaves_the_nan_to_the_application() -> None:
    passing = DIAG.replace("Pass - GPUs: 0, 1, 3, 4, 5, 6, 7", "Pass - All").replace(
        "|                           | Fail - GPU: 2                                  |\n", ""
    )
    a = _run({"gpu005": passing})
    assert a.category == Category.APPLICATION


# A GPU the driver could not initialise at boot (`NVRM: RmInitAdapter failed!`, then
# `rm_init_adapter failed for device bearing minor number 3`, as NVIDIA forum threads quote
# them): the rank bound to it cannot create a CUDA context, which reads as the job's error.
ORDINAL = """\
[1,7]<stderr>:2016-01-21 09:12:22.407809: E tensorflow/core/common_runtime/direct_session.cc:171] \
Internal: failed initializing StreamExecutor for CUDA device ordinal 3: Internal: failed call to \
cuDevicePrimaryCtxRetain: CUDA_ERROR_INVALID_DEVICE
[1,7]<stderr>:tensorflow.python.framework.errors_impl.InternalError: Failed to create session.
"""
RM_INIT = """\
[Thu Jan 21 08:55:14 2016] NVRM: RmInitAdapter failed! (0x26:0xffff:1127)
[Thu Jan 21 08:55:14 2016] NVRM: rm_init_adapter failed for device bearing minor number 3
"""


def test_a_gpu_the_driver_failed_to_initialise_is_that_nodes_gpu_not_the_jobs_error() -> None:
    logs = {"gx-1-08": _lines(RM_INIT, "dmesg_gx-1-08.txt")}
    a = attribute(
        Registry.default(), None, _lines(ORDINAL, "job.log"), None, [], ["gx-1-07", "gx-1-08"],
        node_logs=logs,
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gx-1-08"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_hang_on_a_node_whose_gpu_fails_cuda_memtest_is_that_gpu() -> None:
    """cuda_memtest's error lines (`ERROR: %d errors found in block`, the fork PIConGPU keeps)
    in the node's own file, after a rank timed out waiting for its peer."""
    job = (
        "[rank0]:[E0214 21:12:38.696118312 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=1800000) ran for 1800074 milliseconds before timing out.\n"
    )
    memtest = (
        "[02/14/2021 21:25:15][lab-gpu07][3]:ERROR: 4096 errors found in the block\n"
        "[02/14/2021 21:25:17][lab-gpu07][3]:ERROR: 8192 errors found in the block\n"
    )
    logs = {"lab-gpu07": _lines(memtest, "node_lab-gpu07.txt")}
    a = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], ["lab-gpu07"], node_logs=logs
    )
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["lab-gpu07"])
    clean = {
        "lab-gpu07": _lines(
            "[02/14/2021 21:31:58][lab-gpu07][2]:Test10 finished in 17.9 seconds  (0 errors)\n",
            "node_lab-gpu07.txt",
        )
    }
    b = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], ["lab-gpu07"], node_logs=clean
    )
    assert b.category != Category.HARDWARE_GPU
