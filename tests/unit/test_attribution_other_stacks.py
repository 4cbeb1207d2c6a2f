"""Classes the blind sets 37 (other training stacks' issue threads) and 38 (the scheduler's
records) exposed, each with the real line shapes that carry it (sources in the catalogue
entries and the modules' docstrings).
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(
    job: str, nodes: list[str], node_logs: dict[str, str] | None = None, scheduler: str = ""
) -> Attribution:
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job), None, [], nodes, node_logs=logs,
        scheduler_lines=_lines(scheduler, "scheduler.txt") if scheduler else None,
    )  # fmt: skip


def _advice(a: Attribution) -> AdviceKind:
    return default_advice(a).kind


# ---------------------------------------------------------------- the job's own failures
def test_tensorflows_oom_under_a_graph_execution_error_is_the_jobs_batch() -> None:
    # TF 2.x prints `ResourceExhaustedError: Graph execution error:` and the OOM on the next line.
    job = "".join(
        f"{t}: 2026-04-11 08:03:02.1109{t}0: W tensorflow/core/framework/op_kernel.cc:1828] OP_REQUIRES failed at conv_ops.cc:684 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[1024,256,112,112] and type float on /job:worker/replica:0/task:{t}/device:GPU:0 by allocator GPU_0_bfc\n"
        for t in range(3)
    ) + (
        "0: tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n"
        "0: OOM when allocating tensor with shape[1024,256,112,112] and type float on /job:worker/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
        "srun: error: tfw01: task 0: Exited with exit code 1\n"
        "srun: error: tfw02: task 1: Exited with exit code 1\n"
        "srun: error: tfw03: task 2: Exited with exit code 1\n"
    )
    a = _run(job, ["tfw01", "tfw02", "tfw03"])
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP


TORCHRUN_KILLED = (
    "cai-01: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 812917) of binary: /opt/conda/bin/python\n"
    "cai-02: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 66120) of binary: /opt/conda/bin/python\n"
    "cai-01: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
)


def test_a_memory_cgroup_killing_the_jobs_own_process_is_the_jobs_memory_use() -> None:
    a = _run(TORCHRUN_KILLED, ["cai-01", "cai-02"], {
        "cai-01": "[Fri Apr 10 16:18:01 2026] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0\n"
                  "[Fri Apr 10 16:18:02 2026] Memory cgroup out of memory: Killed process 812917 (python) total-vm:412331044kB, anon-rss:129811220kB, file-rss:0kB, shmem-rss:0kB, UID:1044 pgtables:260112kB oom_score_adj:0\n",
        "cai-02": "[Fri Apr 10 16:18:09 2026] Memory cgroup out of memory: Killed process 66120 (python) total-vm:409922180kB, anon-rss:128440192kB, file-rss:0kB, shmem-rss:0kB, UID:1044 pgtables:258020kB oom_score_adj:0\n",
    })  # fmt: skip
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP
    # A process the job's output does not name (another job's, in another cgroup) is not it.
    other = TORCHRUN_KILLED.replace("812917", "812000").replace("66120", "66000")
    b = _run(other, ["cai-01", "cai-02"], {
        "cai-01": "[Fri Apr 10 16:18:02 2026] Memory cgroup out of memory: Killed process 812917 (python) total-vm:412331044kB, anon-rss:129811220kB, file-rss:0kB, shmem-rss:0kB, UID:1044 pgtables:260112kB oom_score_adj:0\n",
    })  # fmt: skip
    assert _advice(b) != AdviceKind.STOP


def test_jax_finding_no_nccl_in_the_environment_on_every_node_is_the_jobs() -> None:
    line = "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:134: NCCL operation ncclGetUniqueId(&id) failed: Unable to load NCCL library. Multi-GPU collectives will not work.. Last NCCL warning(error) log entry (may be unrelated) 'Unable to load NCCL library. Multi-GPU collectives will not work.'."
    job = (
        f"0: 2026-02-23 23:00:08.992150: W external/xla/xla/service/gpu/runtime/support.cc:58] Intercepted XLA runtime error:\n0: {line}\n"
        f"1: 2026-02-23 23:00:08.992151: W external/xla/xla/service/gpu/runtime/support.cc:58] Intercepted XLA runtime error:\n1: {line}\n"
        "srun: error: hpc-r02n01: task 0: Exited with exit code 1\n"
        "srun: error: hpc-r02n02: task 1: Exited with exit code 1\n"
    )
    a = _run(job, ["hpc-r02n01", "hpc-r02n02"])
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP


MPICH_STACK = (
    "{t}: Fatal error in internal_Init_thread: Other MPI error, error stack:\n"
    "{t}: internal_Init_thread(71)............: MPI_Init_thread(argc=(nil), argv=(nil), required=3, provided=0x7ffd3076b7d8) failed\n"
    "{t}: MPIR_pmi_init(183)..................: \n"
    "{t}: pmi1_barrier(120)...................: PMI_Barrier returned -1\n"
)


def test_mpich_failing_its_pmi_barrier_on_every_rank_is_the_jobs_launch_line() -> None:
    job = "".join(MPICH_STACK.format(t=t) for t in range(4)) + "".join(
        f"srun: error: c11{t + 2}: task {t}: Exited with exit code 15\n" for t in range(4)
    )
    a = _run(job, ["c112", "c113", "c114", "c115"])
    assert a.category == Category.APPLICATION
    assert a.culprit_nodes == []
    assert _advice(a) == AdviceKind.STOP


def test_slurms_pmix_plugin_failing_to_load_on_one_node_is_that_nodes_install() -> None:
    job = (
        "srun: error: hpc-r03n05: mpi/pmix_v4: init: (null) [0]: mpi_pmix.c:195: pmi/pmix: can not load PMIx library\n"
        "srun: error: Couldn't load specified plugin name for mpi/pmix: Plugin init() callback failed\n"
        "srun: error: MPI: Cannot create context for mpi/pmix\n"
        "0: [hpc-r03n04:430817] PMIX ERROR: UNREACHABLE in file server/pmix_server.c at line 3227\n"
        "srun: error: hpc-r03n05: task 1: Exited with exit code 1\n"
        "srun: error: hpc-r03n04: task 0: Killed\n"
        "srun: error: hpc-r03n06: task 2: Killed\n"
    )
    a = _run(job, ["hpc-r03n04", "hpc-r03n05", "hpc-r03n06"])
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["hpc-r03n05"]


def test_an_ssh_launcher_refused_between_the_jobs_nodes_is_the_jobs_launch_method() -> None:
    job = (
        "ml-p4d-3: Host key verification failed.\n"
        "Error: failed to run torchrun --nproc_per_node=8 --nnodes=2 --node_rank=1 --rdzv_backend=c10d --rdzv_endpoint=ml-p4d-3:29500 --rdzv_id=colossalai-default-job train.py on ml-p4d-4, is localhost: False, exception: Encountered a bad command exit code!\n"
        "ml-p4d-3: [W socket.cpp:601] [c10d] The client socket has failed to connect to [ml-p4d-3]:29500 (errno: 111 - Connection refused).\n"
    )
    a = _run(job, ["ml-p4d-3", "ml-p4d-4"])
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP


def test_a_socket_interface_the_job_script_names_and_no_node_has_is_the_jobs() -> None:
    job = (
        "# job script exports: NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0\n"
        "0: gpu-l40-03:57711:57711 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
        "0: gpu-l40-03:57711:57711 [0] NCCL INFO Bootstrap : no socket interface found\n"
        "1: gpu-l40-04:60211:60211 [0] NCCL INFO Bootstrap : no socket interface found\n"
        "0: [rank0]: RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
        "srun: error: gpu-l40-03: task 0: Exited with exit code 1\n"
    )
    a = _run(job, ["gpu-l40-03", "gpu-l40-04"])
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP


def test_a_step_ended_by_its_own_srun_time_limit_with_nothing_saved_is_the_job_scripts() -> None:
    job = (
        "[train] 14:12:30 finished 18000 steps\n"
        "+ srun -t 00:30:00 --ntasks=8 python evaluate.py --suite full\n"
        "[eval] 14:18:50 mmlu: done (0.7649)\n"
        "[eval] 14:25:50 gsm8k: done (0.6941)\n"
        "slurmstepd: error: *** STEP 3320418.1 ON gpu-a07 CANCELLED AT 2024-07-01T14:42:32 DUE TO TIME LIMIT ***\n"
        "srun: error: gpu-a07: tasks 0-7: Terminated\n"
        "+ exit 1\n"
    )
    sacct = (
        "JobID|JobName|Partition|State|ExitCode|Elapsed|NNodes|NodeList|Start|End\n"
        "3320418|train-eval|gpu|FAILED|1:0|06:42:36|1|gpu-a07|2024-07-01T08:00:00|2024-07-01T14:42:36\n"
        "3320418.1|python||TIMEOUT|0:15|00:30:02|1|gpu-a07|2024-07-01T14:12:30|2024-07-01T14:42:32\n"
    )
    a = _run(job, ["gpu-a07"], scheduler=sacct)
    assert a.category == Category.APPLICATION
    assert _advice(a) == AdviceKind.STOP
    # The same kill of a step that had saved a checkpoint: resubmitted, it resumes past it.
    saved = job.replace(
        "[eval] 14:25:50 gsm8k", "[eval] 14:25:50 saved checkpoint step_9.pt\n[eval] 14:26:00 gsm8k"
    )
    b = _run(saved, ["gpu-a07"], scheduler=sacct)
    assert b.category != Category.APPLICATION
    assert _advice(b) != AdviceKind.STOP


def test_training_that_finished_then_idled_in_the_script_until_the_limit_is_the_jobs() -> None:
    job = "".join(f"2024-04-15 12:{10 + i}:00 step {i * 100} loss 1.{i}\n" for i in range(6)) + (
        "Training finished.\n"
        "+ wait\n"
        "slurmstepd: error: *** JOB 990321 ON a40-07 CANCELLED AT 2024-04-15T19:00:00 DUE TO TIME LIMIT ***\n"
    )
    a = _run(job, ["a40-07"])
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert _advice(a) == AdviceKind.STOP
    # Something after the end of training (an evaluation, an upload): not this rule's.
    b = _run(job.replace("+ wait", "running final evaluation on 12 suites"), ["a40-07"])
    assert b.category != Category.APPLICATION or b.kind != AnomalyKind.HANG


# ---------------------------------------------------------------- a node's own state
def test_a_node_whose_firewall_refuses_the_jobs_other_node_is_that_node() -> None:
    job = (
        "0: rtx-31:4410:4410 [0] NCCL INFO Bootstrap : Using ens3f0:10.12.31.31<0>\n"
        "1: rtx-32:7702:7702 [0] NCCL INFO Bootstrap : Using ens3f0:10.12.31.32<0>\n"
        "slurmstepd: error: *** JOB 310877 ON rtx-31 CANCELLED AT 2026-08-07T03:10:14 DUE TO TIME LIMIT ***\n"
    )
    reject = "Aug 07 02:10:33 rtx-32 kernel: filter_IN_public_REJECT: IN=ens3f0 OUT= MAC=b8:ce:f6:2a:11:40:b8:ce:f6:2a:10:f2:08:00 SRC={src} DST=10.12.31.32 LEN=60 PROTO=TCP SPT=41822 DPT=43117 SYN\n"
    a = _run(job, ["rtx-31", "rtx-32"], {"rtx-32": reject.format(src="10.12.31.31")})
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["rtx-32"]
    # The internet's scanners knocking on the node's public side say nothing about the job.
    b = _run(job, ["rtx-31", "rtx-32"], {"rtx-32": reject.format(src="185.220.101.7")})
    assert b.culprit_nodes != ["rtx-32"]


def test_ascends_hccp_busy_on_one_node_is_a_leftover_process_there() -> None:
    job = (
        "atlas-03: [ERROR] 2026-05-21-11:57:54 (PID:927000, Device:3, RankID:19) ERR02200 DIST call hccl api failed.\n"
        "atlas-03: EJ0001: 2026-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training process is running.\n"
        "atlas-03:         Solution: Wait for 10s after killing the last training process and try again.\n"
        "srun: error: atlas-03: task 2: Exited with exit code 1\n"
    )
    a = _run(job, ["atlas-01", "atlas-02", "atlas-03", "atlas-04"])
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["atlas-03"]


def test_an_npu_roce_port_down_under_hccl_socket_timeouts_is_that_nodes_network() -> None:
    job = (
        "0: epoch: 1 step: 700, loss is 2.5000, per step time: 412.21 ms\n"
        "2: EI0006: [PID: 511210] 2026-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank did not send the data in time. Please check the reason for the rank being stuck\n"
        "0: EI0006: [PID: 90211] 2026-04-08-18:07:21.001.201 Getting socket times out. Reason: Remote Rank did not send the data in time. Please check the reason for the rank being stuck\n"
        "srun: error: npu-r1-01: task 0: Exited with exit code 1\n"
    )
    hccn = "$ hccn_tool -i 4 -link -g\nlink status: {state}\n"
    nodes = [f"npu-r1-0{i}" for i in range(1, 9)]
    a = _run(
        job, nodes, {"npu-r1-07": hccn.format(state="DOWN"), "npu-r1-03": hccn.format(state="UP")}
    )
    assert a.category == Category.HARDWARE_NETWORK
    assert a.culprit_nodes == ["npu-r1-07"]
    b = _run(job, nodes, {"npu-r1-07": hccn.format(state="UP")})
    assert b.culprit_nodes != ["npu-r1-07"]


def test_a_ray_workers_address_names_its_node_from_that_nodes_own_files() -> None:
    job = (
        '(ProfileWorker pid=38795, ip=192.168.0.10) E0916 03:26:48.334060625   38795 server_chttp2.cc:40]        {"created":"@1789528008.334021825","description":"No address added out of total 1 resolved","referenced_errors":[{"description":"Unable to configure socket","fd":44,"referenced_errors":[{"description":"Address already in use","errno":98,"os_error":"Address already in use","syscall":"bind"}]}]}\n'
        "RuntimeError: Failed to start the distributed runtime server on 192.168.0.10\n"
        "srun: error: alpa-n1: task 0: Exited with exit code 1\n"
    )
    files = {
        "alpa-n1": "$ ps -eo pid,user,cmd | grep raylet\n 7712 lambda7 raylet --node_ip_address=192.168.0.36\n",
        "alpa-n2": "$ ps -eo pid,user,cmd | grep raylet\n 21044 hchen /opt/ray/raylet --node_ip_address=192.168.0.10 --store_socket_name=/tmp/ray/s\n",
    }
    a = _run(job, ["alpa-n1", "alpa-n2"], files)
    assert a.culprit_nodes == ["alpa-n2"]


def test_a_global_oom_where_another_users_process_holds_the_memory_is_the_nodes() -> None:
    job = "[gpu-b05] 13:53:00 step=2000 loss=2.1184\n" + (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=913377.0. Some of the step tasks have been OOM Killed.\n"
        "srun: error: gpu-b07: task 2: Out Of Memory\n"
    )
    dmesg = (
        "[Mon Sep  9 13:52:29 2024] python invoked oom-killer: gfp_mask=0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP|__GFP_ZERO), order=0, oom_score_adj=0\n"
        "[Mon Sep  9 13:52:29 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/slurm/uid_39981/job_913377/step_0/task_2,task=python,pid=51802,uid=39981\n"
        "[Mon Sep  9 13:52:29 2024] Out of memory: Killed process 51802 (python) total-vm:412004312kB, anon-rss:301125040kB, file-rss:1120kB, shmem-rss:0kB, UID:39981 pgtables:611020kB oom_score_adj:0\n"
    )
    ps = (
        "$ ps -eo pid,user,etime,rss,stat,cmd --sort=-rss | head -4\n"
        "    PID USER         ELAPSED   RSS STAT CMD\n"
        " 201177 {user}      15:37:58 521337812 Dl python /home/kwei/rl/actor.py --job 912004\n"
    )
    scontrol = "JobId=913377 JobName=t2i-dit\n   UserId=nsharma(39981) GroupId=ml(5000) MCS_label=N/A\n   JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null)\n   NodeList=gpu-b[05-08]\n"
    nodes = ["gpu-b05", "gpu-b06", "gpu-b07", "gpu-b08"]
    a = _run(job, nodes, {"gpu-b07": dmesg + ps.format(user="kwei")}, scontrol)
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["gpu-b07"]
    # The biggest process being the job's own user's: the job's memory use.
    b = _run(job, nodes, {"gpu-b07": dmesg + ps.format(user="nsharma")}, scontrol)
    assert b.category == Category.APPLICATION


def test_a_node_failure_whose_node_lost_munge_is_that_nodes_software() -> None:
    job = (
        "[rank0] 21:18:30 step 6550 loss 2.213\n"
        "srun: error: Node failure on gpu-c03\n"
        "slurmstepd: error: *** JOB 880045 ON gpu-c01 CANCELLED AT 2024-04-04T21:18:20 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
    )
    journal = (
        "Apr 04 21:13:20 gpu-c03 systemd[1]: munge.service: Main process exited, code=killed, status=9/KILL\n"
        'Apr 04 21:13:51 gpu-c03 slurmd[3120]: error: Munge encode failed: Failed to access "/run/munge/munge.socket.2": No such file or directory\n'
    )
    nodes = ["gpu-c01", "gpu-c02", "gpu-c03", "gpu-c04"]
    a = _run(job, nodes, {"gpu-c03": journal})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c03"])
    b = _run(job, nodes)
    assert (b.category, b.culprit_nodes) == (Category.SCHEDULER, ["gpu-c03"])


def test_cloud_nodes_that_never_resumed_are_not_left_out() -> None:
    sched = (
        "JobID|JobName|Partition|State|ExitCode|Elapsed|NNodes|NodeList|Start|End\n"
        "12873|gemma-ft|a3|BOOT_FAIL|0:0|00:20:00|2|a3-gpu-dy-[5-6]|2024-08-28T14:00:31|2024-08-28T14:20:31\n"
        "[2024-08-28T14:20:31.896] node a3-gpu-dy-5 not resumed by ResumeTimeout(1200) - marking down and power_save\n"
        "[2024-08-28T14:20:31.124] node a3-gpu-dy-6 not resumed by ResumeTimeout(1200) - marking down and power_save\n"
        "[2024-08-28T14:20:31.502] Killing JobId=12873 on failed node a3-gpu-dy-5\n"
    )
    a = _run(
        "# no output: the batch script never started\n",
        ["a3-gpu-dy-5", "a3-gpu-dy-6"],
        scheduler=sched,
    )
    assert a.category == Category.SCHEDULER
    assert a.culprit_nodes == []
    assert _advice(a) == AdviceKind.REQUEUE


# slurmctld's update_node (src/slurmctld/node_mgr.c) for `scontrol update NodeName=...
# State=DOWN Reason=...`: the job on them dies as a node failure.
def _set_down(reason: str) -> str:
    return (
        "".join(
            f"[2024-06-26T06:30:10.300] update_node: node rk3-n{n} reason set to: {reason}\n"
            f"[2024-06-26T06:30:10.301] update_node: node rk3-n{n} state set to DOWN\n"
            f"[2024-06-26T06:30:11.004] Killing JobId=5120033 on failed node rk3-n{n}\n"
            for n in (13, 14)
        )
        + "JobID|State|ExitCode|End\n5120033|NODE_FAIL|0:0|2024-06-26T06:30:11\n"
    )


SET_DOWN_JOB = (
    "0: [rank0] step 41600 loss 2.1966 0.88 s/it\n"
    "srun: error: Node failure on rk3-n14\n"
    "0: slurmstepd: error: *** JOB 5120033 ON rk3-n13 CANCELLED AT 2024-06-26T06:30:11 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
)


def test_nodes_an_operator_set_down_for_maintenance_are_an_administrative_end() -> None:
    a = _run(
        SET_DOWN_JOB, ["rk3-n13", "rk3-n14"], scheduler=_set_down("CHG-4471 rack 3 PDU replacement")
    )
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, [])
    assert "operator set rk3-n13, rk3-n14 DOWN" in a.summary
    assert _advice(a) == AdviceKind.REQUEUE


def test_nodes_set_down_for_their_hardware_stay_the_culprits() -> None:
    a = _run(SET_DOWN_JOB, ["rk3-n13", "rk3-n14"], scheduler=_set_down("bad DIMM B2, ticket 88"))
    assert a.culprit_nodes == ["rk3-n13", "rk3-n14"]


# ---------------------------------------------------------------- running, hung, slow
def test_a_serving_jobs_decode_batches_are_its_progress() -> None:
    job = (
        "# SGLang 2 nodes; job still running at collection time\n"
        + "".join(
            f"0: [2026-04-01 10:{m:02d}:31 TP0] Decode batch. #running-req: 25, #token: 32000, token usage: 0.15, gen throughput (token/s): 951.{m % 7}, #queue-req: 0\n"
            for m in range(5, 59, 9)
        )
        + "# squeue: job 556120 RUNNING 0:52:10 sg-node[01-02]\n"
    )
    a = _run(job, ["sg-node01", "sg-node02"])
    assert a.kind == "none"


def test_a_first_collective_timing_out_then_silence_until_the_limit_is_a_hang() -> None:
    # Only c10d's glog stamps (no year) before Slurm's dated kill line.
    job = (
        "(WorkerDict pid=231421) [rank1]:[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.\n"
        "(main_task pid=231002) ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "slurmstepd: error: *** JOB 119450 ON gn41 CANCELLED AT 2026-03-14T18:23:01 DUE TO TIME LIMIT ***\n"
    )
    a = _run(job, ["gn41", "gn42"])
    assert a.kind == AnomalyKind.HANG


def test_progress_stamped_with_the_time_of_day_only_dates_from_the_kill_line() -> None:
    # Progress stops as every node loses the file system; the owner's cancel ends the hang.
    job = "".join(
        f"[g0033] 10:{m:02d}:26 rank0: it {23000 + m * 25} loss=1.61 step_time=1.12s\n"
        for m in range(20, 42)
    ) + (
        "[g0033] 10:41:55 rank0: checkpoint -> /lustre/scratch/mol/ckpt/it0023500 begin\n"
        "slurmstepd: error: *** JOB 6620178 ON g0033 CANCELLED AT 2024-09-17T11:06:40 ***\n"
    )
    lost = (
        "[Tue Sep 17 10:41:41 2024] Lustre: scratch-OST0011-osc-ffff9b29c1ad9800: Connection to scratch-OST0011 (at 10.150.2.47@o2ib) was lost; in progress operations using this service will wait for recovery \n"
        "[Tue Sep 17 11:19:44 2024] Lustre: scratch-OST0011-osc-ffff9b29c1ad9800: Connection restored to 10.150.2.48@o2ib (at 10.150.2.48@o2ib)\n"
    )
    a = _run(job, ["g0033", "g0036", "g0040"], {"g0033": lost, "g0036": lost, "g0040": lost},
             "JobId=6620178 JobName=molgen-pt\n   JobState=CANCELLED Reason=None\n")  # fmt: skip
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.SYSTEM_SOFTWARE, [])


def test_one_ranks_data_time_in_per_rank_worker_logs_is_the_applications_straggler() -> None:
    job = (
        "# PaddleDetection on 4 nodes pd-gpu[01-04] x 8 GPUs; job still running\n"
        + "".join(
            f"[05/11 14:{10 + 2 * i:02d}:00] ppdet.engine INFO: Epoch: [0] [{i * 200:4d}/7330] learning_rate: 0.001250 loss: 2.3 batch_cost: 1.8832 data_cost: 1.4661 ips: 4.2479 images/s\n"
            for i in range(5)
        )
        + "".join(
            f"[workerlog.{r}]  batch_cost: 1.88{r % 10} data_cost: {'1.4702' if r == 13 else '0.0021'}\n"
            for r in (0, 7, 13, 22, 31)
        )
    )
    a = _run(
        job,
        ["pd-gpu01", "pd-gpu02", "pd-gpu03", "pd-gpu04"],
        {"pd-gpu02": "(no kernel messages in the job window)\n"},
    )
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.APPLICATION,
        [],
    )
    assert _advice(a) == AdviceKind.NONE


# ---------------------------------------------------------------- the normaliser
def test_ray_and_task_label_prefixes_are_peeled_with_their_host_and_task() -> None:
    ray = strip_prefixes(
        "(RayWorkerWrapper pid=60211, ip=10.30.4.4) [rank17]:[E314 14:33:45.17 ProcessGroupNCCL.cpp:607] x"
    )
    assert (ray.host, ray.rank, ray.body) == (
        "10.30.4.4",
        17,
        "[E314 14:33:45.17 ProcessGroupNCCL.cpp:607] x",
    )
    vllm = strip_prefixes(
        "(VllmWorker TP0 pid=35532) ERROR 08-26 04:05:22 [multiproc_executor.py:559] x"
    )
    assert vllm.body.startswith("ERROR 08-26")
    task = strip_prefixes("[task 3] json.decoder.JSONDecodeError: Unterminated string")
    assert (task.task, task.body) == (3, "json.decoder.JSONDecodeError: Unterminated string")
    assert strip_prefixes("(a) b").body == "(a) b"  # (a parenthesis of prose stays)


# ---------------------------------------------------------------- sets 39-41
def test_an_hca_firmware_fatal_under_open_mpi_timestamped_output_is_that_nodes_network() -> None:
    # Open MPI's --tag-output --timestamp-output: `<ISO time>: [job,rank]<stream>:` before NCCL's own prefix.
    job = (
        "2023-06-02T16:25:37.206Z: [1,12]<stdout>:dgx1-08:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error\n"
        "2023-06-02T16:25:43.562Z: [1,21]<stderr>:RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1556653099582/work/torch/lib/c10d/ProcessGroupNCCL.cpp:272, unhandled system error\n"
        "2023-06-02T16:25:43.555Z: [1,29]<stderr>:RuntimeError: NCCL error in: /opt/conda/conda-bld/pytorch_1556653099582/work/torch/lib/c10d/ProcessGroupNCCL.cpp:272, unhandled system error\n"
    )
    health = (
        "[Fri Jun  2 16:25:36 2023] mlx5_core 0000:05:00.0: poll_health:755:(pid 0): Fatal error 1 detected\n"
        "[Fri Jun  2 16:25:36 2023] mlx5_core 0000:05:00.0: print_health_info:435:(pid 0): synd 0x1: firmware internal error\n"
    )
    nodes = ["dgx1-07", "dgx1-08", "dgx1-09", "dgx1-10"]
    a = _run(job, nodes, {"dgx1-08": health})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["dgx1-08"])
    assert strip_prefixes(job.splitlines()[0]).rank == 12


def test_acs_left_on_in_one_nodes_pcie_switches_is_that_nodes_setting() -> None:
    job = (
        "".join(
            f"[gpu-n2{n}] [rank{r}]:[E603 05:12:00.1 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
            for n, r in ((1, 0), (2, 1), (3, 2), (4, 3))
        )
        + "srun: error: gpu-n21: task 0: Exited with exit code 1\n"
    )
    acs = "\t\tACSCtl:\tSrcValid{v} TransBlk- ReqRedir{v} CmpltRedir{v} UpstreamFwd{v} EgressCtrl- DirectTrans-\n"
    nodes = ["gpu-n21", "gpu-n22", "gpu-n23", "gpu-n24"]
    a = _run(job, nodes, {"gpu-n22": acs.format(v="-"), "gpu-n23": acs.format(v="+")})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-n23"])


WATCHDOG = "[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802218 milliseconds before timing out.\n"


def test_every_rank_timing_out_in_the_same_collective_names_no_node() -> None:
    job = "".join(WATCHDOG.format(r=r) for r in range(16)) + (
        "srun: error: gpu-v101: task 0: Exited with exit code 1\n"
        "srun: error: gpu-v102: task 1: Exited with exit code 1\n"
    )
    a = _run(job, ["gpu-v101", "gpu-v102"])
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.UNKNOWN, [])
    # Rank 7 missing from the reports (silent): not everyone waited, the silent one is suspect.
    b = _run(job.replace(WATCHDOG.format(r=7), ""), ["gpu-v101", "gpu-v102"])
    assert b.summary != a.summary


def test_rank_zero_busy_with_its_own_work_while_the_others_time_out_is_the_jobs_code() -> None:
    job = (
        "0: [2025-01-22 16:19:39,013] INFO: running test on clic_edm_ttbar_pf (rank 0)\n"
        + "".join(
            f"{t}: [rank{r}]:[E0122 16:49:49.193945801 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=172811, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800052 milliseconds before timing out.\n"
            for t, r in ((0, 1), (0, 2), (0, 3), (1, 4), (1, 5), (1, 6), (1, 7))
        )
        + "0: [2025-01-22 16:50:09,118] INFO: make_plots: writing 42 plots to /mnt/ceph/users/ewu/mlpf/exp/plots/epoch_1\n"
        "srun: error: workergpu044: tasks 4-7: Aborted (core dumped)\n"
    )
    a = _run(
        job,
        ["workergpu041", "workergpu044"],
        {"workergpu041": "(no kernel messages in the job window)\n"},
    )
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert _advice(a) == AdviceKind.STOP
    # Rank 0 silent after the others' timeouts: nothing says it was busy elsewhere.
    b = _run(
        job.replace("0: [2025-01-22 16:50:09,118] INFO: make_plots", "# make_plots"),
        ["workergpu041", "workergpu044"],
    )
    assert b.category != Category.APPLICATION


STUCK_DUMP = (
    "# py-spy dump of task 9 on node-14\n"
    'Thread 77120 (idle): "MainThread"\n'
    "    wait (threading.py:327)\n"
    "    get (queue.py:180)\n"
    "    _next_record (speechlm/data/sharded.py:158)\n"
    "    __iter__ (speechlm/data/sharded.py:131)\n"
    "    __next__ (torch/utils/data/dataloader.py:701)\n"
    "    main (train_asr.py:96)\n"
    "    wrapper (torch/distributed/elastic/multiprocessing/errors/__init__.py:345)\n"
)


def test_a_rank_waiting_on_its_own_codes_queue_while_the_others_time_out_is_a_deadlock() -> None:
    job = (
        "".join(
            f"{r}: [rank{r}]:[E0610 00:06:56.320539176 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=33871, OpType=ALLREDUCE, NumelIn=152850688, NumelOut=152850688, Timeout(ms)=600000) ran for 1800010 milliseconds before timing out.\n"
            for r in range(16)
            if r != 9
        )
        + STUCK_DUMP
        + "slurmstepd: error: *** JOB 2209931 ON node-12 CANCELLED AT 2024-06-09T23:56:02 ***\n"
    )
    nodes = ["node-12", "node-13", "node-14", "node-15"]
    a = _run(job, nodes, {n: "(no kernel messages in the job window)\n" for n in nodes})
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert _advice(a) == AdviceKind.STOP
    # The same wait inside a library's own queue (not the job's code) says nothing of the job.
    site = "/opt/venv/lib/python3.11/site-packages/webdataset"
    lib = job.replace("(speechlm/data/sharded.py:158)", f"({site}/tariterators.py:158)").replace(
        "(speechlm/data/sharded.py:131)", f"({site}/pipeline.py:131)"
    )
    b = _run(lib.replace("(torch/utils/data/dataloader.py:701)", "(lightning/loops/fit_loop.py:701)"), nodes,
             {n: "(no kernel messages in the job window)\n" for n in nodes})  # fmt: skip
    assert b.category != Category.APPLICATION


def test_a_dataloader_wait_under_torchruns_record_wrapper_ended_by_the_limit_stops() -> None:
    dumps = (
        'Thread 913320 (active): "MainThread"\n'
        "    broadcast (torch/distributed/distributed_c10d.py:1191)\n"
        "    eval_batch (deepspeed/runtime/pipe/engine.py:459)\n"
        "    main (pretrain_gpt.py:245)\n"
        'Thread 913324 (idle): "MainThread"\n'
        "    wait (threading.py:306)\n"
        "    get (queue.py:179)\n"
        "    _try_get_data (torch/utils/data/dataloader.py:1011)\n"
        "    _get_data (torch/utils/data/dataloader.py:1163)\n"
        "    __next__ (torch/utils/data/dataloader.py:530)\n"
        "    eval_batch (deepspeed/runtime/pipe/engine.py:453)\n"
        "    wrapper (torch/distributed/elastic/multiprocessing/errors/__init__.py:345)\n"
    )
    job = (
        "[2022-05-09 05:35:11] PULSE: tr11-176B-ml is running for 8:04:09 since 2022-05-08T21:31:02\n"
        "[2022-05-09 17:35:11] PULSE: tr11-176B-ml is running for 20:04:09 since 2022-05-08T21:31:02\n"
        "slurmstepd: error: *** JOB 2287711 ON r7i0n0 CANCELLED AT 2022-05-09T17:31:05 DUE TO TIME LIMIT ***\n"
    )
    a = _run(
        job,
        ["r7i0n0", "r7i5n6"],
        {"r7i5n6": dumps, "r7i0n0": "(no kernel messages in the job window)\n"},
    )
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert _advice(a) == AdviceKind.STOP  # (not a free requeue for the time limit)


def test_megatrons_rerun_verdict_printed_by_rank_zero_blames_the_rank_that_computed_wrongly() -> (
    None
):
    job = (
        "5: [rank43]: [2025-01-21 05:44:51] WARNING [megatron.core.rerun_state_machine] Unexpected result tensor(nan, device='cuda:3') on rank 43 at iteration #18204 invocation #1 (message='found NaN in local forward loss calculation')\n"
        "srun: error: gpu-r3-14: task 5: Exited with exit code 16\n"
        "srun: error: gpu-r3-09: task 0: Exited with exit code 16\n"
        "0: [2025-01-21 05:48:07] WARNING [megatron.core.rerun_state_machine] Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect\n"
        "0: [2025-01-21 05:48:07] WARNING [megatron.core.rerun_state_machine] Possible persistent error!\n"
    )
    nodes = [
        "gpu-r3-09",
        "gpu-r3-10",
        "gpu-r3-11",
        "gpu-r3-12",
        "gpu-r3-13",
        "gpu-r3-14",
        "gpu-r3-15",
        "gpu-r3-16",
    ]
    a = _run(job, nodes)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-r3-14"])
    # Megatron's own failure line names the node.
    b = _run(
        "Rank 29, node gpu-r3-11, device 5, iteration #5120: Possible transient error!\n", nodes
    )
    assert (b.category, b.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-r3-11"])


def test_rank_zeros_periodic_sample_generation_is_an_application_straggler() -> None:
    it = "3:  [2024-12-02 {t}] iteration {i:8d}/   50000 | consumed samples: {s:12d} | elapsed time per iteration (ms): {ms} | global batch size:   256 |\n"
    job = "# job still running at capture (2024-12-02 18:09)\n"
    minute = 0
    for block in range(4):
        for k in range(9):
            i = block * 100 + k * 10 + 10
            job += it.format(
                t=f"17:{minute // 60:02d}:{minute % 60:02d}", i=i, s=i * 256, ms="4110.2"
            )
            minute += 1
        job += f"0: [rank0] iteration {block * 100 + 100}: generating 16 samples for wandb table (greedy, max_new_tokens=256) ...\n"
        job += f"0: [rank0] sample generation took 19{block}.2 s\n"
        job += it.format(
            t=f"17:{minute // 60:02d}:{minute % 60:02d}", i=block * 100 + 100, s=0, ms="23641.1"
        )
        minute += 1
    a = _run(job, ["node21", "node23"], {"node21": "(no kernel messages in the job window)\n"})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.APPLICATION,
        [],
    )
    assert _advice(a) == AdviceKind.NONE


def test_nvrx_reports_flagging_a_different_rank_each_time_with_steady_gpus_are_the_jobs() -> None:
    job = "# job still running at time of capture\n"
    for n, (slow, other) in enumerate(((5, 17), (28, 7), (14, 9), (30, 22))):
        job += (
            f"[2024-09-04 06:{10 + n:02d}:00] iteration {8500 + n * 5} | elapsed time per iteration (ms): 4563.7 |\n"
            f"[2024-09-04 06:{10 + n:02d}:00] megatron.bridge.NVRxStragglerDetection: GPU relative performance:\n"
            f"  Rank={slow} Node=h100-n05{1 + slow // 8} Score=0.62\n"
            f"  Rank={other} Node=h100-n05{1 + other // 8} Score=0.86\n"
            f"[2024-09-04 06:{10 + n:02d}:00] megatron.bridge.NVRxStragglerDetection: GPU individual performance:\n"
            f"  Rank={other} Node=h100-n05{1 + other // 8} Score=0.98\n"
            "  Rank=0 Node=h100-n051 Score=1.00\n"
        )
    a = _run(job, ["h100-n051", "h100-n052", "h100-n053", "h100-n054"])
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.APPLICATION,
        [],
    )
    # The individual scores falling too: the GPUs themselves slow down, not the job's work.
    b = _run(
        job.replace("Score=0.98", "Score=0.55"),
        ["h100-n051", "h100-n052", "h100-n053", "h100-n054"],
    )
    assert b.category != Category.APPLICATION


def test_the_address_most_peers_fail_towards_is_the_one_dhcp_moved() -> None:
    job = (
        "1: roce-h800-12:4506:4599 [6] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 10.40.3.23<58760> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.40.3.22 remoteGids::ffff:10.40.3.23\n"
        "3: roce-h800-14:4705:4798 [5] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 10.40.3.23<42312> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.40.3.24 remoteGids::ffff:10.40.3.23\n"
        "0: roce-h800-11:4405:4498 [1] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 10.40.3.23<41002> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.40.3.21 remoteGids::ffff:10.40.3.23\n"
        "2: roce-h800-13:4611:4702 [2] transport/net_ib.cc:1695 NCCL WARN NET/IB : Got completion from peer 10.40.3.22<44645> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.40.3.23 remoteGids::ffff:10.40.3.22\n"
        "srun: error: roce-h800-11: task 0: Exited with exit code 1\n"
    )
    journal = (
        "Sep 25 15:43:57 roce-h800-13 dhclient[1732]: DHCPNAK from 10.40.0.1 (xid=0x5a1c3e21)\n"
        "Sep 25 15:44:00 roce-h800-13 systemd-networkd[1198]: enp26s0np0: DHCPv4 address 10.40.3.77/16, gateway 10.40.0.1 acquired from 10.40.0.1\n"
    )
    nodes = ["roce-h800-11", "roce-h800-12", "roce-h800-13", "roce-h800-14"]
    a = _run(job, nodes, {"roce-h800-13": journal})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["roce-h800-13"])


def test_one_node_whose_own_rules_drop_incoming_by_default_is_that_nodes_firewall() -> None:
    job = (
        "".join(
            f"{t}: gpu27{t + 1}:2{t}000:2{t}000 [0] NCCL INFO Bootstrap : Using enp170s0f0np0:10.70.0.7{t + 1}<0>\n"
            for t in range(4)
        )
        + "slurmstepd: error: *** JOB 884136 ON gpu271 CANCELLED AT 2026-11-23T07:00:00 DUE TO TIME LIMIT ***\n"
    )
    rules = "$ iptables -S INPUT | head\n-P INPUT {policy}\n-A INPUT -p tcp --dport 22 -j ACCEPT\n"
    nodes = ["gpu271", "gpu272", "gpu273", "gpu274"]
    a = _run(
        job, nodes, {"gpu273": rules.format(policy="DROP"), "gpu272": rules.format(policy="ACCEPT")}
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu273"])
    # Every node dropping by default: the site's own profile, not one node's.
    b = _run(job, nodes, {n: rules.format(policy="DROP") for n in nodes})
    assert b.culprit_nodes != ["gpu273"]


# ---------------------------------------------------------------- sets 42-43
def test_the_jobs_own_divergence_build_and_launch_errors_on_every_rank_stop() -> None:
    lines = {
        "gpt-neox": "Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.",
        "xformers": "FATAL: kernel `fmha_cutlassF_f32_aligned_64x64_rf_sm80` is for sm80-sm100, but was built for sm50",
        "vllm": "(EngineCore_0 pid=2811) ERROR 10-01 09:14:33 [core.py:700] ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.",
    }
    for what, line in lines.items():
        job = f"0: {line}\n1: {line}\nsrun: error: n1: task 0: Exited with exit code 1\nsrun: error: n2: task 1: Exited with exit code 1\n"
        a = _run(job, ["n1", "n2"])
        assert (a.category, _advice(a)) == (Category.APPLICATION, AdviceKind.STOP), what


def test_an_undated_node_oom_the_job_restarted_its_workers_past_is_healthy() -> None:
    job = (
        "# job still running\n"
        + "".join(
            f"0: [batch={b}/20000]:\n0: \t Train throughput/batches_per_sec: 1.21\n"
            for b in range(3800, 4100, 100)
        )
        + "1: [rank13]: RuntimeError: DataLoader worker (pid 401772) is killed by signal: Killed. \n"
        "1: W0511 02:56:01.000000 40112 torch/distributed/elastic/agent/server/api.py:723] [default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
        + "".join(
            f"0: [batch={b}/20000]:\n0: \t Train throughput/batches_per_sec: 1.20\n"
            for b in range(4000, 6100, 100)
        )
    )
    dmesg = "[May 11 02:55:59] Memory cgroup out of memory: Killed process 401772 (pt_data_worker) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:10kB oom_score_adj:0\n"
    a = _run(
        job,
        ["p4d-1", "p4d-2"],
        {"p4d-2": dmesg},
        "JobId=12090 JobName=mpt-3b\n   JobState=RUNNING Reason=None\n",
    )
    assert a.kind == "none"


def test_an_env_printout_is_not_the_job_script_setting_it() -> None:
    job = (
        "# the job prints its environment before launch; TaskProlog=/etc/slurm/task_prolog.d/40-nccl.sh\n"
        + (
            "NCCL_SOCKET_IFNAME=ib0\n"
            + "".join(
                f"c-14-0{n}: c-14-0{n}:5100{n}:5100{n} [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found\n"
                for n in range(1, 5)
            )
            + "".join(
                f"srun: error: c-14-0{n}: task {n - 1}: Exited with exit code 1\n"
                for n in range(1, 5)
            )
        )
    )
    nodes = [f"c-14-0{n}" for n in range(1, 5)]
    a = _run(job, nodes)
    assert a.category == Category.SYSTEM_SOFTWARE  # (the site's, on every node: stop, naming them)
    assert _advice(a) == AdviceKind.STOP
    b = _run(
        job.replace("\nNCCL_SOCKET_IFNAME=ib0\n", "\n+ export NCCL_SOCKET_IFNAME=ib0\n"), nodes
    )
    assert b.category == Category.APPLICATION


def test_a_fixed_width_sacct_hostlist_with_a_suffix_after_its_range() -> None:
    from resurgo.attribute.scheduler import parse_scheduler

    sacct = (
        "JobID           JobName  Partition      State ExitCode    Elapsed        NodeList \n"
        "------------ ---------- ---------- ---------- -------- ---------- --------------- \n"
        "71902          grug-moe       h100     FAILED      1:0   00:00:37 g530[5-8]cc     \n"
    )
    facts = parse_scheduler(_lines(sacct, "scheduler.txt"), None, None)
    assert facts.job is not None and facts.job.node_list == [
        "g5305cc",
        "g5306cc",
        "g5307cc",
        "g5308cc",
    ]


def test_transport_errors_of_a_node_slurm_then_lost_do_not_make_it_hardware() -> None:
    # (A dying node's own queue pairs time out too: ambiguous, not the cause of its loss.)
    job = (
        "36: node037:40290:40590 [2] NCCL WARN NET/IB : Got completion from peer 10.44.0.36<40857> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
        "slurmstepd: error: *** JOB 1500388 ON node001 CANCELLED AT 2025-08-03T02:22:44 DUE TO NODE FAILURE ***\n"
    )
    sched = "[2025-08-03T02:20:41.195] error: Nodes node037 not responding\n[2025-08-03T02:22:41.195] error: Nodes node037 not responding, setting DOWN\n"
    a = _run(job, [f"node{n:03d}" for n in range(1, 65)], scheduler=sched)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, ["node037"])


def test_pyxis_failing_on_enroots_own_runtime_directory_is_not_a_registry_outage() -> None:
    job = (
        "".join(
            "slurmstepd: error: pyxis: failed to import docker image\n"
            "slurmstepd: error: pyxis:     mkdir: cannot create directory '/run/enroot': Permission denied\n"
            for _ in range(2)
        )
        + "srun: error: vm-1: task 0: Exited with exit code 1\nsrun: error: vm-2: task 1: Exited with exit code 1\n"
    )
    slurmd = "[2024-05-02T10:00:01.000] error: pyxis: failed to import docker image\n"
    a = _run(job, ["vm-1", "vm-2"], {"vm-1": slurmd, "vm-2": slurmd})
    assert a.category == Category.SYSTEM_SOFTWARE
    assert "shared service" not in a.summary


# Horovod's SHUT_DOWN_ERROR (horovod/common/operations.cc) on the ranks still running, under
# mpirun's --tag-output; Open MPI's report of the first process to exit non-zero.
def _horovod(first_rank: int, finisher: str = "", killed: str = "") -> str:
    shutdown = (
        "[1,{r}]<stderr>:Horovod has been shut down. This was caused by an exception on one of "
        "the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the "
        "ranks finished execution. If the shutdown was caused by an exception, you should see "
        "the exception in the log before the first shutdown message.\n"
    )
    return (
        "[1,0]<stderr>:I runner.py:310] Step = 50000 ; steps/s = 2.01 ; Loss = 1.9000\n"
        + finisher
        + "".join(shutdown.format(r=r) for r in (3, 7, 12))
        + killed
        + "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n"
        f"  Process name: [[41210,1],{first_rank}]\n"
        "  Exit code:    1\n"
    )


def test_horovod_shut_down_by_a_rank_that_finished_its_loop_is_the_jobs_control_flow() -> None:
    early = "[1,0]<stderr>:I runner.py:322] Early stopping conditions are met. Exiting.\n"
    a = _run(_horovod(3, early), ["hv01", "hv02"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert _advice(a) == AdviceKind.STOP


def test_horovod_shut_down_after_a_rank_was_killed_is_not_the_jobs_control_flow() -> None:
    killed = (
        "mpirun noticed that process rank 5 with PID 0 on node hv02 exited on signal 9 (Killed).\n"
    )
    a = _run(_horovod(5, killed=killed), ["hv01", "hv02"])
    assert a.category != Category.APPLICATION
