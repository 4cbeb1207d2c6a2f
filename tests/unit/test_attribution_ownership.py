"""Who owns what failed: the job's code and settings (application) or the site's (system
software), and whether a retry can help. Each rule with a real message format."""

from __future__ import annotations

import pytest

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(job: str, nodes: list[str], node_logs: dict[str, str] | None = None) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in (node_logs or {}).items()}
    return attribute(Registry.default(), None, _lines(job), None, [], nodes, node_logs=logs)


# Lightning's `_validate_srun_variables` (Lightning-AI/pytorch-lightning#15011, #20391): a
# library checking the arguments the job's own script passed it.
LIBRARY_VALIDATION = """\
Traceback (most recent call last):
  File "/home/rb/lit/train_lit.py", line 77, in <module>
    trainer = L.Trainer(devices=args.devices, num_nodes=args.num_nodes, strategy="ddp")
  File "/opt/conda/lib/python3.11/site-packages/lightning/fabric/plugins/environments/slurm.py", \
line 176, in _validate_srun_variables
    raise RuntimeError(
RuntimeError: You set `devices=4` in Lightning, but the number of tasks per node configured in \
SLURM `--ntasks-per-node=1` does not match. HINT: Set `devices=1`.
srun: error: gpu01: task 0: Exited with exit code 1
srun: error: gpu02: task 1: Exited with exit code 1
"""


def test_a_library_rejecting_the_jobs_arguments_is_the_application() -> None:
    a = _run(LIBRARY_VALIDATION, ["gpu01", "gpu02"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_unknown_error_deep_in_a_library_is_not_stopped_at_once() -> None:
    # The same shape, raised by the autograd engine rather than by a check: no verdict on
    # the job's input, so no stop on its first occurrence.
    job = LIBRARY_VALIDATION.replace(
        'environments/slurm.py", line 176, in _validate_srun_variables',
        'autograd/graph.py", line 825, in _engine_run_backward',
    ).replace("RuntimeError: You set", "RuntimeError: something odd happened; You set")
    a = _run(job, ["gpu01", "gpu02"])
    assert default_advice(a).kind != AdviceKind.STOP


def test_an_environment_error_from_a_check_is_not_called_the_jobs() -> None:
    job = LIBRARY_VALIDATION.replace(
        "RuntimeError: You set `devices=4`", "ConnectionError: could not reach `devices=4`"
    )
    assert _run(job, ["gpu01", "gpu02"]).category != Category.APPLICATION


# Ray's memory monitor (ray-project/ray#30312): the job's own workers filled the node's memory.
RAY_OOM = """\
(raylet, ip=10.12.0.43) [2026-09-28 17:03:12,442 E 79811 79811] (raylet) node_manager.cc:3069: \
1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other \
reasons at node (ID: 6c1e1b0f4e2d, IP: 10.12.0.43) over the last time period.
ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
"""


def test_rays_memory_monitor_killing_a_worker_is_the_jobs_memory_use() -> None:
    a = _run(RAY_OOM, ["cpu-a100-41", "cpu-a100-43"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


# torch.save's short write (pytorch/pytorch#40863) and `lfs quota` (lfs-quota(1)): `*` marks the
# limit reached.
SHORT_WRITE = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/lustre/home/om/DiT/train_dit.py", line 236, in main
[rank0]:     torch.save(checkpoint, checkpoint_path)
[rank0]:   File "/opt/conda/lib/python3.11/site-packages/torch/serialization.py", line 850, in save
[rank0]:     with _open_zipfile_writer(f) as opened_zipfile:
[rank0]: RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 2881615424 vs \
2881615312
srun: error: gpu-n41: task 0: Exited with exit code 1
srun: error: gpu-n42: task 1: Exited with exit code 1
"""
QUOTA = """\
$ lfs quota -h -u om /lustre
Disk quotas for {kind} om (uid 60311):
     Filesystem    used   quota   limit   grace   files   quota   limit   grace
        /lustre   2.00T*     2T    2.2T  6d23h   81204       0       0       -
"""


def test_a_write_into_the_users_full_quota_is_the_jobs_storage_use() -> None:
    nodes = ["gpu-n41", "gpu-n42"]
    a = _run(SHORT_WRITE, nodes, {"gpu-n41": QUOTA.format(kind="usr")})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_write_into_a_full_project_quota_is_the_sites_limit_and_stops() -> None:
    nodes = ["gpu-n41", "gpu-n42"]
    a = _run(SHORT_WRITE, nodes, {"gpu-n41": QUOTA.format(kind="prj")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_quota_under_its_limit_says_nothing() -> None:
    quota = QUOTA.format(kind="usr").replace("2.00T*", "1.20T ")
    a = _run(SHORT_WRITE, ["gpu-n41", "gpu-n42"], {"gpu-n41": quota})
    assert default_advice(a).kind != AdviceKind.STOP


# NCCL's bootstrap (NVIDIA/nccl src/bootstrap.cc) with NCCL_SOCKET_IFNAME from the site's task
# prolog, on every node of the job: nothing left to exclude, a retry meets the same setting.
NO_INTERFACE = """\
# site TaskProlog exports NCCL_SOCKET_IFNAME=ib0 (the job script sets no NCCL_* variables)
0: a40-21:11022:11022 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0
0: a40-21:11022:11022 [0] NCCL WARN Bootstrap : no socket interface found
1: a40-22:9031:9031 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0
1: a40-22:9031:9031 [0] NCCL WARN Bootstrap : no socket interface found
srun: error: a40-21: task 0: Exited with exit code 1
srun: error: a40-22: task 1: Exited with exit code 1
"""


def test_a_site_setting_broken_on_every_node_names_them_all_and_stops() -> None:
    a = _run(NO_INTERFACE, ["a40-21", "a40-22"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["a40-21", "a40-22"])
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_same_setting_exported_by_the_job_script_is_the_application() -> None:
    job = "+ export NCCL_SOCKET_IFNAME=ib0\n" + NO_INTERFACE.split("\n", 1)[1]
    a = _run(job, ["a40-21", "a40-22"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


# NCCL 2.27 prints no warning for a missing NCCL_SOCKET_IFNAME interface and fails on the
# unset address instead (NVIDIA/nccl#1837): torch's generic DistBackendError, then NCCL's detail.
NO_INTERFACE_SILENT = """\
# site TaskProlog exports NCCL_SOCKET_IFNAME=eth2 (the job script sets no NCCL_* variables)
0: trainer0:1958:1958 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2
1: trainer1:1958:1958 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2
0: [rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/\
c10d/ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the NCCL developers, \
NCCL version 2.27.7
0: [rank0]: ncclInternalError: Internal check failed.
0: [rank0]: Last error:
0: [rank0]: ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor \
AF_INET6(10)
1: [rank8]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/\
c10d/ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the NCCL developers, \
NCCL version 2.27.7
1: [rank8]: ncclInternalError: Internal check failed.
1: [rank8]: Last error:
1: [rank8]: ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor \
AF_INET6(10)
srun: error: trainer0: task 0: Exited with exit code 1
srun: error: trainer1: task 1: Exited with exit code 1
"""


def test_a_site_interface_setting_nccl_fails_on_silently_names_every_node_and_stops() -> None:
    a = _run(NO_INTERFACE_SILENT, ["trainer0", "trainer1"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["trainer0", "trainer1"])
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_interface_exported_by_the_job_is_the_application_under_a_generic_error() -> None:
    job = "+ export NCCL_SOCKET_IFNAME=eth2\n" + NO_INTERFACE_SILENT.split("\n", 1)[1]
    a = _run(job, ["trainer0", "trainer1"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_operators_note_that_the_job_script_exports_it_is_the_application() -> None:
    note = "# job script (user-owned) contains: export NCCL_SOCKET_IFNAME=eth2  NCCL_IB_DISABLE=1\n"
    a = _run(note + NO_INTERFACE_SILENT.split("\n", 1)[1], ["trainer0", "trainer1"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_note_that_the_site_exports_it_and_the_job_script_does_not_stays_the_sites() -> None:
    note = (
        "# site: /etc/slurm/task_prolog.d/50-nccl.sh exports NCCL_SOCKET_IFNAME=eth2; the job "
        "script sets no NCCL_* variables\n"
    )
    a = _run(note + NO_INTERFACE_SILENT.split("\n", 1)[1], ["trainer0", "trainer1"])
    assert a.category == Category.SYSTEM_SOFTWARE


def test_a_site_setting_broken_on_some_nodes_excludes_them() -> None:
    nodes = ["a40-19", "a40-20", "a40-21", "a40-22"]
    job = (
        "2: a40-19:7001:7001 [0] NCCL INFO Bootstrap : Using eno1:10.0.0.19<0>\n"
        "3: a40-20:7001:7001 [0] NCCL INFO Bootstrap : Using eno1:10.0.0.20<0>\n" + NO_INTERFACE
    )
    a = _run(job, nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["a40-21", "a40-22"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


# pyxis printing enroot's log (NVIDIA/pyxis#12): the site image's runtime path.
ENROOT = """\
{t}: slurmstepd: error: pyxis: child 4081{t} failed with error code: 1
{t}: slurmstepd: error: pyxis: failed to import docker image
{t}: slurmstepd: error: pyxis: printing enroot log file:
{t}: slurmstepd: error: pyxis:     mkdir: cannot create directory '/run/enroot': Permission denied
{t}: slurmstepd: error: pyxis: couldn't start container
"""


def test_a_container_runtime_broken_on_every_node_stops() -> None:
    job = (
        ENROOT.format(t=0)
        + ENROOT.format(t=1)
        + (
            "srun: error: gpu310: task 0: Exited with exit code 1\n"
            "srun: error: gpu311: task 1: Exited with exit code 1\n"
        )
    )
    a = _run(job, ["gpu310", "gpu311"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu310", "gpu311"])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_registry_outage_on_every_node_is_retried() -> None:
    # The same pyxis wrapper over a registry's 503 (a shared service that comes back).
    job = (ENROOT.format(t=0) + ENROOT.format(t=1)).replace(
        "mkdir: cannot create directory '/run/enroot': Permission denied",
        "[ERROR] URL https://registry.hpc.internal:5005/v2/ml/t/manifests/1 returned error "
        "code: 503 Service Unavailable",
    )
    a = _run(job, ["gpu310", "gpu311"])
    assert default_advice(a).kind == AdviceKind.REQUEUE


# The CUDA caching allocator's OOM message names the other processes on the GPU
# (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp); the rank's node comes from srun.
HELD_BY_OTHER = """\
[rank11]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has a \
total capacity of 79.11 GiB of which 1.21 GiB is free. Process 48812 has 36.02 GiB memory in use. \
Process 3301917 has 41.86 GiB memory in use.
srun: error: gpu-a31: task 1: Exited with exit code 1
[rank0]:[E1110 07:23:31.889201003 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=118, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, \
Timeout(ms)=600000) ran for 600077 milliseconds before timing out.
srun: error: gpu-a30: task 0: Exited with exit code 1
"""


def test_an_oom_from_another_process_names_the_node_srun_saw_fail_first() -> None:
    a = _run(HELD_BY_OTHER, ["gpu-a30", "gpu-a31", "gpu-a32"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-a31"])


# PyTorch's lazy CUDA init (torch/cuda/__init__.py) on every rank of every node.
NO_GPUS = """\
{header}0: [rank0]: RuntimeError: No CUDA GPUs are available
1: [rank1]: RuntimeError: No CUDA GPUs are available
srun: error: gpu-r08: task 0: Exited with exit code 1
srun: error: gpu-r09: task 1: Exited with exit code 1
"""


def test_no_gpu_anywhere_for_a_job_that_asked_for_gpus_is_the_sites_and_stops() -> None:
    a = _run(NO_GPUS.format(header="#SBATCH --nodes=2 --gres=gpu:4\n"), ["gpu-r08", "gpu-r09"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r08", "gpu-r09"])
    assert default_advice(a).kind == AdviceKind.STOP


def test_no_gpu_anywhere_for_a_job_that_asked_for_none_is_the_applications() -> None:
    a = _run(NO_GPUS.format(header="#SBATCH --nodes=2\n"), ["gpu-r08", "gpu-r09"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


# Real lines from public issue threads (cited in each catalogue entry's source), raised deep
# in an installed library: the message says the job's code, data or environment is at fault.
LIBRARY_RAISED = [
    "RuntimeError: Expected all tensors to be on the same device, but found at least two "
    "devices, cuda:0 and cpu!",
    "RuntimeError: No backend type associated with device type cpu",
    "RuntimeError: expected scalar type Float but found Half",
    "RuntimeError: Trying to backward through the graph a second time (or directly access saved "
    "tensors after they have already been freed).",
    "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of "
    "the following reasons: 1) Use of a module parameter outside the `forward` function.",
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    "OSError: meta-llama/Llama-2-70b-chat-hf is not a local folder and is not a valid model "
    "identifier listed on 'https://huggingface.co/models'",
    "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so "
    "you have two options, do those steps only if you trust the source of the checkpoint.",
    "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major "
    "versions. PyTorch has CUDA Version=11.8 and torchvision has CUDA Version=12.1.",
    "RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 "
    "and [3, 256, 256] at entry 3",
    "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
    "allocate 17179869184 bytes.",
]


@pytest.mark.parametrize("line", LIBRARY_RAISED)
def test_a_library_error_about_the_jobs_own_use_is_the_application(line: str) -> None:
    job = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/train.py", line 88, in <module>\n'
        "    out = step(model, batch)\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, '
        "in _call_impl\n"
        "    return forward_call(*args, **kwargs)\n"
        f"{line}\n"
    )
    a = _run(job, ["gpu01"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_compiler_wrapper_is_judged_by_the_error_it_wraps() -> None:
    # torch/_dynamo/output_graph.py raises BackendCompilerFailed with the backend's own error
    # on the next line: a full local /tmp is the node's, not the job's code.
    job = (
        "5: [rank40]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
        "5: [rank40]: OSError: [Errno 28] No space left on device: "
        "'/tmp/torchinductor_fm/fx_graph_cache/k7/tmp3q1xv_z0'\n"
        "srun: error: gpu-m07: task 5: Exited with exit code 1\n"
    )
    a = _run(job, [f"gpu-m0{i}" for i in range(2, 10)])
    assert a.category == Category.SYSTEM_SOFTWARE


# CPython's FileNotFoundError and datasets' `Unable to find` (huggingface/datasets load.py).
def _missing(path: str, script: str = "/home/zhang/LLaMA-Factory/src/train.py") -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "{script}", line 14, in <module>\n'
        "    main()\n"
        f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'\n"
    )


def test_a_missing_file_relative_to_the_job_is_its_configuration() -> None:
    a = _run(_missing("data/alpaca_data.json"), ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def test_a_missing_file_inside_the_jobs_code_tree_is_its_configuration() -> None:
    a = _run(_missing("/home/zhang/LLaMA-Factory/data/my_sft.json"), ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def test_a_missing_file_on_a_shared_mount_is_not_stopped_on_one_rank() -> None:
    # Elsewhere than the job's tree: a mount missing on this node may be back elsewhere.
    a = _run(_missing("/lustre/data/pile/shard-00017.tar"), ["gpu01", "gpu02"])
    assert default_advice(a).kind != AdviceKind.STOP


def test_a_dataset_library_rejecting_the_jobs_data_is_the_application() -> None:
    job = (
        "Traceback (most recent call last):\n"
        '  File "/root/sft/train.py", line 66, in <module>\n'
        '    ds = load_dataset("json", data_files=args.data)\n'
        '  File "/usr/local/lib/python3.10/dist-packages/datasets/builder.py", line 1905, in '
        "_prepare_split_single\n"
        '    raise DatasetGenerationError("An error occurred while generating the dataset") '
        "from e\n"
        "datasets.exceptions.DatasetGenerationError: An error occurred while generating the "
        "dataset\n"
    )
    a = _run(job, ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def test_a_boxed_rich_traceback_is_read_like_pythons_own() -> None:
    # rich's traceback (accelerate, kohya sd-scripts): frames `│ path:line in func │`.
    job = (
        "╭───────────── Traceback (most recent call last) ─────────────╮\n"
        "│ /home/u/kohya_ss/sd-scripts/train_network.py:240 in train   │\n"
        "│                                                             │\n"
        '│ ❱  240 │   │   raise RuntimeError("max_token_length")       │\n'
        "╰─────────────────────────────────────────────────────────────╯\n"
        "RuntimeError: max_token_length must be 150 or 225\n"
    )
    a = _run(job, ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def test_a_dataloader_workers_error_is_read_below_its_wrapper() -> None:
    # torch/_utils.py ExceptionWrapper re-raises a worker's error with `Caught ... Original
    # Traceback`; PIL's error names an image in the job's own data tree.
    job = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/cls/train.py", line 77, in <module>\n'
        "    for batch in loader:\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/_utils.py", line 722, in reraise\n'
        "    raise exception\n"
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/home/u/cls/dataset.py", line 41, in __getitem__\n'
        "    img = self.transform(Image.open(self.paths[i]))\n"
        '  File "/opt/conda/lib/python3.10/site-packages/PIL/Image.py", line 3298, in open\n'
        "    raise UnidentifiedImageError(msg)\n"
        "PIL.UnidentifiedImageError: cannot identify image file "
        "'/home/u/cls/data/train/img_0412.jpg'\n"
    )
    a = _run(job, ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


@pytest.mark.parametrize(
    "job",
    [
        # Slurm refusing the job's own request (slurm_errno.c strings as srun prints them).
        "srun: error: Unable to create step for job 4412201: More processors requested than "
        "permitted\n",
        # torch's dlopen of a CUDA library the job's environment lacks.
        "Traceback (most recent call last):\n"
        '  File "/home/u/venv/lib/python3.10/site-packages/torch/__init__.py", line 235, in '
        "_load_global_deps\n"
        "    raise err\n"
        "OSError: libcudnn.so.8: cannot open shared object file: No such file or directory\n",
    ],
)
def test_the_jobs_request_or_environment_refused_everywhere_stops(job: str) -> None:
    a = _run(job, ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def _library_raised(message: str) -> str:
    return (
        "[rank8]: Traceback (most recent call last):\n"
        '[rank8]:   File "/home/ana/llava/train.py", line 58, in <module>\n'
        "[rank8]:     model = build(cfg)\n"
        '[rank8]:   File "/opt/venv/lib/python3.10/site-packages/somelib/core.py", line 420, in '
        "build\n"
        "[rank8]:     return _impl(cfg)\n"
        f"[rank8]: {message}\n"
    )


def test_an_unknown_library_error_under_the_jobs_call_is_weakly_the_jobs() -> None:
    # The job's category, but one rank's error of no known class is retried once first.
    a = _run(_library_raised("RuntimeError: unsupported operand in graph rewrite"), ["gpu-k03"])
    assert a.category == Category.APPLICATION
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_an_unknown_library_error_about_the_driver_is_not_called_the_jobs() -> None:
    # torch/cuda/__init__.py on a node whose driver does not match (CUDA error 803).
    message = (
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has "
        "unsupported display driver / cuda driver combination"
    )
    assert _run(_library_raised(message), ["gpu-k03"]).category != Category.APPLICATION


def test_a_traceback_quoted_from_its_middle_is_still_followed() -> None:
    # Issue threads often paste only the last frames; a frame opens the traceback.
    job = (
        '  File "/home/u/proj/model.py", line 77, in forward\n'
        "    h = self.block(x)\n"
        '  File "/opt/conda/lib/python3.10/site-packages/somelib/ops.py", line 12, in run\n'
        "    return _run(x)\n"
        "RuntimeError: unsupported operand in graph rewrite\n"
    )
    assert _run(job, ["gpu01"]).category == Category.APPLICATION


def test_an_unknown_library_error_about_reaching_something_is_not_called_the_jobs() -> None:
    # c10d's TCPStore client (`Socket Timeout`): a peer or the store, not the job's use.
    assert _run(_library_raised("RuntimeError: Socket Timeout"), ["gpu-k03"]).category != (
        Category.APPLICATION
    )


def test_an_oom_whose_gpu_is_held_by_the_jobs_own_ranks_is_the_jobs() -> None:
    # Two of the job's ranks mapped to one GPU: the processes the allocator names are the
    # job's own (torchrun names their pids), not another job's leftover.
    job = (
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 23.65 GiB of which 19.06 MiB is free. Process 2231 has 11.80 GiB "
        "memory in use. Process 2232 has 11.80 GiB memory in use.\n"
        "W0101 10:00:00.000000 2200 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 2231 closing signal SIGTERM\n"
        "E0101 10:00:01.000000 2200 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: 1) local_rank: 1 (pid: 2232) of binary: /usr/bin/python\n"
    )
    a = _run(job, ["gpu01"])
    assert (a.category, default_advice(a).kind) == (Category.APPLICATION, AdviceKind.STOP)


def test_a_container_image_the_registry_does_not_have_is_the_jobs() -> None:
    # enroot's importer line under pyxis's failure (NVIDIA/enroot#146): a 404 is the job's
    # --container-image; the 503 of a registry outage is retried (tested above).
    job = (ENROOT.format(t=0) + ENROOT.format(t=1)).replace(
        "mkdir: cannot create directory '/run/enroot': Permission denied",
        "[ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.13-py3 returned error "
        "code: 404 Not Found",
    )
    a = _run(job, ["gpu310", "gpu311"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_unlabelled_pyxis_failure_is_decided_by_the_enroot_log_below_it() -> None:
    # Without `srun -l` slurmstepd's pyxis lines carry no task label: the 404 in enroot's log
    # printed below still says whose the failure is.
    job = "".join(
        ENROOT.format(t=0)
        .replace("0: ", "")
        .replace(
            "mkdir: cannot create directory '/run/enroot': Permission denied",
            "[ERROR] URL https://nvcr.io/v2/nvidia/pytorch/manifests/24.13-py3 returned error "
            "code: 404 Not Found",
        )
        + f"srun: error: {node}: task {t}: Exited with exit code 1\n"
        for t, node in enumerate(["node-17", "node-18"])
    )
    a = _run(job, ["node-17", "node-18"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_host_name_quoted_in_a_network_error_is_no_path_of_the_jobs() -> None:
    # requests' ConnectionError quotes the host: the hub is unreachable, not the job's file.
    message = (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', "
        "port=443): Max retries exceeded with url: /bert-base-uncased/resolve/main/config.json"
    )
    a = _run(_library_raised(message), ["gpu-k03"])
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


# PyTorch's CUDA initialisation (c10/cuda/CUDAFunctions.cpp) on every node of a cluster with one
# driver: whose build needs the newer driver decides.
def _driver_too_old(site_packages: str, prelude: str = "") -> str:
    warning = (
        f"{site_packages}/torch/cuda/__init__.py:129: UserWarning: CUDA initialization: The "
        "NVIDIA driver on your system is too old (found version 12020). Please update your GPU "
        "driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx"
    )
    return prelude + "".join(
        f"{t}: [rank{t}]: {warning}\n{t}: [rank{t}]: RuntimeError: No CUDA GPUs are available\n"
        f"srun: error: gpu{t + 10}: task {t}: Exited with exit code 1\n"
        for t in (0, 1)
    )


def test_a_driver_too_old_for_the_jobs_own_environment_is_the_job() -> None:
    activate = "+ source /scratch/kchen/envs/llm311/bin/activate\n"
    for job in (
        _driver_too_old("/home/users/kchen/envs/llm311/lib/python3.11/site-packages"),
        # A home directory on a site's parallel file system (/gpfs/home/<user>) is still home.
        _driver_too_old("/gpfs/home/kchen/.local/lib/python3.11/site-packages"),
        _driver_too_old("/scratch/kchen/envs/llm311/lib/python3.11/site-packages", activate),
    ):
        a = _run(job, ["gpu10", "gpu11"])
        assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
        assert default_advice(a).kind == AdviceKind.STOP


def test_a_driver_too_old_for_the_sites_image_on_every_node_is_the_sites() -> None:
    a = _run(_driver_too_old("/opt/conda/lib/python3.11/site-packages"), ["gpu10", "gpu11"])
    assert a.category == Category.SYSTEM_SOFTWARE
    assert default_advice(a).kind == AdviceKind.STOP
