"""GPUs held by processes older than the job, or of another Slurm job: an earlier job's
leftovers, the node's state.

Real formats: `nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv`,
`amd-smi process` (PROCESS_INFO / PID / VRAM_MEM), procps `ps -o pid,user,etime,cmd`
(ELAPSED `[[dd-]hh:]mm:ss`), `/proc/PID/environ`'s `SLURM_JOB_ID=`, sacct's fixed-width
table, srun's task exit line."""

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

JOB = """\
+ srun --ntasks-per-node=1 python -m preflight --smoke
srun: error: gpu25: task 1: Exited with exit code 2
"""
SACCT = """\
JobID           JobName      State ExitCode    Elapsed        NodeList
------------ ---------- ---------- -------- ---------- ---------------
88412        llama70b-+     FAILED      2:0   00:01:02     gpu[24-25]
"""
AMD_SMI = """\
$ amd-smi process -G 0
GPU: 0
    PROCESS_INFO:
        NAME: python3
        PID: 2291877
        MEMORY_USAGE:
            VRAM_MEM: 213.1 GB
$ ps -o pid,user,etime,cmd -p 2291877
    PID USER      ELAPSED CMD
2291877 rlteam   {etime} python3 -m train --config grpo.yaml
"""


def test_a_gpu_process_older_than_the_job_is_an_earlier_jobs_leftover() -> None:
    a = attribute_text(
        JOB, ["gpu24", "gpu25"], {"node_gpu25": AMD_SMI.format(etime="11:42:09")}, SACCT
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu25"])
    assert first_action(a) == "requeue_excluding_nodes"


def test_a_gpu_process_as_young_as_the_job_is_its_own() -> None:
    a = attribute_text(
        JOB, ["gpu24", "gpu25"], {"node_gpu25": AMD_SMI.format(etime="00:58")}, SACCT
    )
    assert a.category != Category.SYSTEM_SOFTWARE


NVIDIA_SMI = """\
$ nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv
pid, used_memory [MiB], gpu_bus_id
2203118, 21404 MiB, 00000000:1A:00.0
2291402, 3318 MiB, 00000000:1A:00.0
$ tr '\\0' '\\n' < /proc/2203118/environ | grep SLURM_JOB_ID
SLURM_JOB_ID={job}
"""
HUNG = """\
[DEBUG] Trainer: configuring model
slurmstepd: error: *** JOB 55131 ON gpu03 CANCELLED AT 2023-10-17T20:03:52 DUE TO TIME LIMIT ***
"""
HUNG_SACCT = """\
JobID           JobName      State ExitCode    Elapsed        NodeList
------------ ---------- ---------- -------- ---------- ---------------
55131        threestudi    TIMEOUT      0:0   06:00:40          gpu03
"""


def test_a_gpu_process_of_another_slurm_job_is_that_jobs_leftover() -> None:
    a = attribute_text(HUNG, ["gpu03"], {"node_gpu03": NVIDIA_SMI.format(job="55120")}, HUNG_SACCT)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu03"])


def test_a_gpu_process_of_this_job_is_no_leftover() -> None:
    a = attribute_text(HUNG, ["gpu03"], {"node_gpu03": NVIDIA_SMI.format(job="55131")}, HUNG_SACCT)
    assert a.category == Category.UNKNOWN
