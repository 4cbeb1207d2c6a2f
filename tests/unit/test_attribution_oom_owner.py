"""Whose memory a node's OOM kill was about, and a lone signal on a node whose log is clean.

The kernel's OOM report (Linux mm/oom_kill.c) names the cgroup that ran out (Slurm's
`job_<id>` paths) and lists each process's uid and rss: another job's OOM on a shared node is not
this job's; a global OOM where another user's leftover process holds the memory is the node's
state (attribution-labels.md tie-breaker 4), the job's own processes holding it is the job's.
A task killed by a signal on a node whose kernel log was checked and is empty names no node
(tie-breaker 2: only evidence names a node). Lines as a real run's srun and kernel printed them.
"""

# ruff: noqa: E501  (real kernel lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["node1", "node2", "node3"]
SCONTROL = "JobId={job} JobName=ddp-train\n   JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0\n   NodeList=node[1-3]\n"


def _run(job: str, dmesg: dict[str, str], job_id: int = 9) -> Attribution:
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in dmesg.items()}
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], NODES, node_logs=logs,
        scheduler_lines=_lines(SCONTROL.format(job=job_id), "scheduler.txt"),
    )  # fmt: skip


CLEAN = "(no kernel messages in the job window)\n"
PROGRESS = "".join(
    f"0: 2026-12-05 05:03:5{i} [rank0|node1] step {i}/150 loss=2.31 step_time=0.33s\n"
    for i in range(1, 4)
)
SEGV = PROGRESS + (
    "srun: error: node2: task 1: Segmentation fault (core dumped)\n"
    "srun: error: node1: task 0: Exited with exit code 1\n"
    "srun: error: node3: task 2: Exited with exit code 1\n"
)
MEMCG_OOM = (
    "[Sat Dec  5 05:04:06 2026] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
    "[Sat Dec  5 05:04:06 2026] Memory cgroup stats for /slurm/uid_0/job_{job}/step_0/task_1:\n"
    "[Sat Dec  5 05:04:06 2026] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/slurm/uid_0/job_{job}/step_0/task_1,task_memcg=/slurm/uid_0/job_{job}/step_0/task_1,task=python,pid=27047,uid=0\n"
    "[Sat Dec  5 05:04:06 2026] Memory cgroup out of memory: Killed process 27047 (python) total-vm:1344768kB, anon-rss:714612kB, file-rss:88560kB, shmem-rss:0kB, UID:0 pgtables:1904kB oom_score_adj:0\n"
)


def test_a_signal_on_a_node_whose_kernel_log_is_clean_names_no_node() -> None:
    a = _run(SEGV, {"node1": CLEAN, "node2": CLEAN, "node3": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.UNKNOWN, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_another_jobs_oom_kill_on_the_node_is_not_this_jobs() -> None:
    a = _run(SEGV, {"node1": CLEAN, "node2": MEMCG_OOM.format(job=10), "node3": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.UNKNOWN, [])
    assert default_advice(a).kind != AdviceKind.STOP


def test_this_jobs_own_oom_kill_is_the_jobs() -> None:
    killed = PROGRESS + "srun: error: node2: task 1: Killed\n"
    a = _run(killed, {"node1": CLEAN, "node2": MEMCG_OOM.format(job=9), "node3": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


LEFTOVER = (
    "[Sat Dec  5 05:11:37 2026] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0\n"
    "[Sat Dec  5 05:11:37 2026] Tasks state (memory values in pages):\n"
    "[Sat Dec  5 05:11:37 2026] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name\n"
    "[Sat Dec  5 05:11:37 2026] [  77121] 41234 77121 98211741 93122817 752312320        0             0 python3\n"
    "[Sat Dec  5 05:11:37 2026] [  88410] 43017 88410 17301210 16412200 133214208        0             0 python\n"
    "[Sat Dec  5 05:11:37 2026] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_9/step_0/user/task_0,task=python,pid=88410,uid=43017\n"
    "[Sat Dec  5 05:11:37 2026] Out of memory: Killed process 88410 (python) total-vm:69204840kB, anon-rss:65648800kB, file-rss:0kB, shmem-rss:0kB, UID:43017 pgtables:130092kB oom_score_adj:0\n"
)


def test_a_global_oom_held_by_another_users_process_excludes_the_node() -> None:
    job = PROGRESS + (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=9.0. Some of the step tasks have been OOM Killed.\n"
        "srun: error: node2: task 1: Out Of Memory\n"
    )
    a = _run(job, {"node1": CLEAN, "node2": LEFTOVER, "node3": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["node2"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_launchers_report_of_a_killed_rank_on_a_clean_node_names_no_node() -> None:
    # DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler) on node2.
    job = PROGRESS + (
        "node2: [2026-12-05 05:04:09,004] [ERROR] [launch.py:325:sigkill_handler] "
        "['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits with return code = -9\n"
    )
    a = _run(job, {"node1": CLEAN, "node2": CLEAN, "node3": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.UNKNOWN, [])
    a = _run(job, {"node1": CLEAN, "node3": CLEAN})  # node2's log not in the bundle: suspect
    assert a.culprit_nodes == ["node2"]


# A rank's NCCL error printed first, then torchrun's record of the child the kernel killed
# (torch/distributed/elastic/multiprocessing/errors, as in hpcaitech/ColossalAI#3595).
def _killed(pid: int) -> str:
    return (
        "0: [rank0]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL"
        ".cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
        "2.18.1\n"
        "1: E1202 13:55:18.240521 139736984387205 torch/distributed/elastic/multiprocessing/api.py"
        ":869] failed (exitcode: -9) local_rank: 1 (pid: 48115) of binary: /opt/conda/bin/python3\n"
        "1: Root Cause (first observed failure):\n"
        "1: [0]:\n"
        "1:   time      : 2026-12-02_13:55:18\n"
        "1:   host      : node2\n"
        "1:   rank      : 3 (local_rank: 1)\n"
        f"1:   exitcode  : -9 (pid: {pid})\n"
        "1:   error_file: <N/A>\n"
        f"1:   traceback : Signal 9 (SIGKILL) received by PID {pid}\n"
        "srun: error: node1: task 0: Exited with exit code 1\n"
        "srun: error: node2: task 1: Exited with exit code 1\n"
    )


CGROUP_OOM = (
    "[Wed Dec 02 13:55:17 2026] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0\n"
    "[Wed Dec 02 13:55:17 2026] Memory cgroup out of memory: Killed process 48115 (python) total-vm:212334220kB, anon-rss:61288412kB, file-rss:0kB, shmem-rss:4kB, UID:21880 pgtables:128440kB oom_score_adj:0\n"
)


def test_the_child_the_kernel_oom_killed_is_the_root_not_its_peers_nccl_error() -> None:
    a = _run(_killed(48115), {"node1": CLEAN, "node2": CGROUP_OOM})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "node1" not in a.culprit_nodes
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_oom_kill_of_another_process_does_not_explain_the_job() -> None:
    a = _run(_killed(50001), {"node1": CLEAN, "node2": CGROUP_OOM})
    assert "out of host memory" not in a.summary


def test_a_dataloader_worker_the_kernel_oom_killed_is_the_jobs_memory_not_shm() -> None:
    # torch/utils/data/_utils/signal_handling.py: the bus-error hint and the worker's death.
    job = PROGRESS + (
        "0: [rank3]:ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).\n"
        "0: [rank3]:RuntimeError: DataLoader worker (pid 48115) is killed by signal: Killed.\n"
        "srun: error: node2: task 1: Out Of Memory\n"
    )
    a = _run(job, {"node1": CLEAN, "node2": CGROUP_OOM})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_array_tasks_own_sacct_row_decides_not_its_completed_siblings() -> None:
    # sbatch(1) sets SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID; sacct -X lists every task.
    job = (
        "SLURM_ARRAY_JOB_ID=3301870 SLURM_ARRAY_TASK_ID=12 SLURM_JOB_NODELIST=node2\n"
        "Traceback (most recent call last):\n"
        '  File "/home/pv/embed/embed_corpus.py", line 97, in main\n'
        "    table = pq.read_table(args.shard, columns=['id', 'text'])\n"
        "FileNotFoundError: /data/corpus/v3/train-00012-of-00016.parquet\n"
        "srun: error: node2: task 0: Exited with exit code 1\n"
    )
    rows = "".join(
        f"3301870_{t:<5} {'FAILED' if t == 12 else 'COMPLETED':>10}      {'1:0' if t == 12 else '0:0'}"
        f"   00:4{t % 10}:01         node{t % 3 + 1}\n"
        for t in range(16)
    )
    sacct = (
        "JobID             State ExitCode    Elapsed        NodeList\n"
        "------------ ---------- -------- ---------- ---------------\n" + rows
    )
    a = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], NODES, node_logs={},
        scheduler_lines=_lines(sacct, "scheduler.txt"),
    )  # fmt: skip
    assert a.category == Category.APPLICATION
    assert "completed" not in a.summary


def _cuda_oom(held: str, allocated: str) -> str:
    # PyTorch >= 2.1 (c10/cuda/CUDACachingAllocator.cpp): NVML's processes on the GPU, then
    # the failing process's own allocator.
    return (
        "[rank7]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. "
        "GPU 7 has a total capacity of 39.39 GiB of which 14.00 MiB is free. Process 1117993 has "
        f"{held} GiB memory in use. Of the allocated memory {allocated} GiB is allocated by "
        "PyTorch, and 385.64 MiB is reserved by PyTorch but unallocated.\n"
        "srun: error: node1: task 0: Exited with exit code 1\n"
    )


def test_a_lone_holder_using_what_this_process_allocated_is_this_process() -> None:
    a = _run(_cuda_oom("39.36", "38.34"), {"node1": CLEAN})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_lone_holder_using_far_more_than_this_process_is_another_process() -> None:
    a = _run(_cuda_oom("39.36", "6.10"), {"node1": CLEAN})
    assert a.category == Category.SYSTEM_SOFTWARE


def test_a_dataloader_segfault_line_for_a_worker_the_kernel_killed_is_the_jobs_memory() -> None:
    # The DataLoader's handler prints a segfault line for any dead worker (torch/csrc/
    # DataLoader.cpp); the kernel's report names the worker it killed.
    job = PROGRESS + (
        "ERROR: Unexpected segmentation fault encountered in worker.\n"
        "RuntimeError: DataLoader worker (pid 48115) is killed by signal: Killed.\n"
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=14604003.batch. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.\n"
    )
    a = _run(job, {"node1": CLEAN, "node2": CGROUP_OOM})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


# PyTorch >= 2.1's accounting of the GPU (c10/cuda/CUDACachingAllocator.cpp). Inside a container's
# PID namespace NVML sees no process: `this process has 0 bytes memory in use` beside the 48 GiB
# PyTorch itself allocated, so what is neither free nor "this process's" is no other holder.
BLIND_NVML = "1: [rank15]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU 7 has a total capacity of 79.11 GiB of which 2.61 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated memory 48.15 GiB is allocated by PyTorch, with 50.00 MiB allocated in private pools (e.g., CUDA Graphs), and 3.49 GiB is reserved by PyTorch but unallocated.\nsrun: error: node2: task 1: Exited with exit code 1\n"
HELD = "1: [rank15]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.11 GiB of which 1.56 GiB is free. Process 2281190 has 61.40 GiB memory in use. Including non-PyTorch memory, this process has 16.12 GiB memory in use. Of the allocated memory 14.90 GiB is allocated by PyTorch, and 0.41 GiB is reserved by PyTorch but unallocated.\nsrun: error: node2: task 1: Exited with exit code 1\n"


def test_an_oom_whose_process_nvml_cannot_see_is_the_jobs_model() -> None:
    a = _run_text(PROGRESS + BLIND_NVML)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), a.summary
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_oom_beside_another_process_holding_most_of_the_gpu_is_the_nodes() -> None:
    a = _run_text(PROGRESS + HELD)
    assert a.category == Category.SYSTEM_SOFTWARE, a.summary


def _run_text(job: str) -> Attribution:
    return attribute(Registry.default(), None, _lines(job, "job.log"), None, [], NODES)


# PyTorch < 2.1's accounting with no rank or host prefix (a single-GPU job): 7.8 of 7.92 GiB
# neither free nor PyTorch's, a zombie of an earlier job holding it.
ZOMBIE = "RuntimeError: CUDA out of memory. Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already allocated; 24.56 MiB free; 86.00 MiB reserved in total by PyTorch)\n"


def test_another_holder_of_the_only_nodes_gpu_names_that_node() -> None:
    a = attribute(
        Registry.default(), None, _lines("Epoch # 0 ...\n" + ZOMBIE, "job.log"), None, [],
        ["iabeng11"],
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["iabeng11"]), a.summary
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


# DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler) names no pid with the
# child's -9; it lists its children as it kills the rest. The kernel's report names one of them.
DS_KILLED = """\
[2025-03-11 16:20:14,552] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 410125
[2025-03-11 16:20:14,552] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 410126
[2025-03-11 16:20:15,208] [ERROR] [launch.py:325:sigkill_handler] ['/home/user/miniconda3/envs/qwen2/bin/python', '-u', 'src/train/train_sft.py', '--local_rank=2'] exits with return code = -9
srun: error: node2: task 0: Exited with exit code 247
"""
HOST_OOM = "[Tue Mar 11 16:20:13 2025] Out of memory: Killed process {pid} (python) total-vm:79905000kB, anon-rss:22957108kB, file-rss:72036kB, shmem-rss:15143164kB, UID:1000 pgtables:78032kB oom_score_adj:0\n"


def _ds(pid: str) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(PROGRESS + DS_KILLED, "job.log"), None, [], ["node2"],
        node_logs={"node2": _lines(HOST_OOM.format(pid=pid), "dmesg_node2.txt")},
    )  # fmt: skip


def test_the_kernel_oom_killing_one_of_deepspeeds_children_is_the_jobs_memory() -> None:
    a = _ds("410126")
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), a.summary
    assert "host memory" in a.summary


def test_an_oom_kill_of_a_process_not_the_launchers_is_not_read_as_the_jobs() -> None:
    assert "ran out of host memory" not in _ds("999999").summary
