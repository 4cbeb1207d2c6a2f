"""The readers added for sessions 14-16's classes, on text a cluster user controls: the job's own
output and anything it can get into a node's journal (`logger`). Each reader's fragment repeated
into 8 KiB lines, and random mixes of them, must attribute without an exception (the engine's
fallback verdict would hide one as `attribution failed`). Their cost per MiB is measured by
`bench/hostile_bundles.py`, not here (no timing thresholds in tests)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.log_lines import attribute_text

# Each reader's opening, never completed (the shape that makes an unbounded gap try every start).
FRAGMENTS = [
    "$ getent hosts gpu-c01\n10.1.0.21 gpu-c01 ",  # name_resolution
    "mlx5_3\t1\t3\t0000:0000:ffff:0a14:0169\t10.20.1.105\t",  # node_software: show_gids rows
    "NCCL_IB_GID_INDEX set by environment to 3 export NCCL_IB_GID_INDEX=",
    "$ systemctl is-active firewalld\nactive\n● firewalld.service - ",  # firewall state
    "[1653488081.109170] [cn101:48211:0] UCX ERROR ",  # the UCX prefix
    "[c10d] The client socket has timed out after 60s while trying to connect to (gpu-b[12-",
    "AUTOTUNE flex_attention(1x24x32760x128, ",  # autotuning_until_the_limit
    "Running tokenizer on dataset:  8%|#| ",  # preprocessing outlasting the timeout
    "INFO: Rank 0: run_predictions ",  # a rank named in the line's own text
    "cxi_core 0000:c1:00.0: cxi0[hsn0] CXI_EVENT_LINK_",  # link pairs
    "habanalabs hl5: ECC error detected. address: 0x1 Syndrom: 0x2 block id ",
    "(LLMRayActor pid=1, ip=10.9.3.5) Duplicate GPU detected : rank 0 and rank ",
    "1a:00.0 Infiniband controller: NCCL INFO NET/IB : No device found ",
    "loss 1.98 samples/s ",
    " | Fan FAN3_TACH | Lower Critical going low | ",
    # session 16's readers: operators' notes, per-rank lines, node-side checks
    "# job still running; same model/config ran at 3.9-4.1 it/s, tps ~3,300, step_time = 0.0",
    "# last progress line at 2023-03-07T03:54:44 progress stopped at ",
    "# rank 11 py-spy: shardlists.py:__iter__; ranks 0-10 in all_gather; rank 2: ",
    "# each attempt hangs right after step 1500 on a different node ",
    "I1216 09:16:24.842427 88121 trainer.py:606]   rank 0: step 1.94 (compute 1.19, summary ",
    "[W724 13:10:15.447000 20811 torch/distributed/run.py:793] ",
    "rank 2 | step 10 | data 0.198s | fwd ",
    "DETECTED RELATIVE STRAGGLER SECTION=step_tail RANK=0 NODE=",
    "[rank60] WARNING python gc gen2 collection took 0.88s ",
    "gpu-c02:1:2 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change ",
    "4: ens1f0np0: <BROADCAST,UP,LOWER_UP> mtu 1500 qdisc \tactive_mtu:\t1024 (3) ",
    "gpu-c02:1:1 [0] NCCL INFO Bootstrap : Using virbr0:192.168.122.1<0> ",
    "[Rank 13] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41221, OpType=",
    "ERROR: (Test0) 12 errors found in block Status: FAIL - test discovered HW problems ",
    "slurmstepd: error: execve(): /tmp/slurmd/job00089/slurm_script: No such file or directory",
    "+ export CUDA_LAUNCH_BLOCKING=1 --shm-size=64m time: 1.0310 (1.020) ",
    "NVRM: rm_init_adapter failed for device bearing minor number ",
    # session 17's readers: year-less stamps, advertised addresses, firewall-cmd, leftover GPU
    # processes, UCX/Open MPI prefixes, sacct's fixed-width Elapsed, progress spellings
    "I0229 25:61:99.1 INFO 13-45 06:38:07 [loggers.py:1] Avg generation throughput: 0.0 tokens/s",
    "NCCL INFO NET/Socket : Using [0]br-05ab:172.19.0.1<0> [1]usb0:169.254.0.1<0> "
    "Connect to 169.254.0.1<1> failed ",
    "$ firewall-cmd --state\nrunning\nNet : Connect to 10.1.0.21<4> failed : No route to host ",
    "pid, used_memory [MiB]\n2203118, 21404 MiB\n$ ps -o pid,etime\n    PID ELAPSED\n"
    "2203118 99-23:59:59 ",
    "/proc/1/environ\nSLURM_JOB_ID=999999999999\n    PID: 1\n"
    "[1667558352.1] [gpu-c02:1:0] [gpu-c01:2] ",
    "JobID JobName State Elapsed\n41 t TIMEOUT 9999-23:59:59\n41 CANCELLED by 0 x 00:00:01 ",
    # session 18's readers: space-separated phases, a cancel after silence, teardown exits,
    # nvidia-smi's ERR!, squeue's CG beside sacct
    "it 1 step 0.5s data 0.1s a 1s b 2s c 3s d 4s e 5s f 6s g 7s h 8s i 9s j ",
    "2022-06-28 09:17:13,881 - mmdet - INFO - Epoch [1][50/1563]\tlr: 1.5e-02, time: 1.862, "
    "data_time: 0.5\nslurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2022-06-28T13:40:11 ***\n",
    "Training finished: reached max_steps=100\nsrun: error: n1: task 1: Exited with exit code ",
    "|ERR!  ERR! ERR!      1W /  N/A |ERR!  ERR! ERR! ",
    "JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n7 gpu x u CG 5:10:00 1 c[024-",
    "# no further output for 9999h99m after 99999 minutes without a log line no more output for ",
    "0: lightning/fabric/plugins/environments/slurm.py:204: The `srun` command is available on "
    "your system but is not used. ",
    "# single-node 8-GPU run: time: 1e309 per iter Train Steps/Sec: 99999999999999999999 "
    "'train_speed(iter/s)': ",
    "# throughput 99.99999% below the same config last week 0% under the baseline ",
    "step: 9.9999e+99 'global_step/max_steps': '1/0' itr 99999999999999999999/1 ",
    # session 19's readers: separate rendezvous worlds, container bridges, missing net plugins
    "The node 'gpu-c01_1_0' has joined round 0 of the rendezvous '' as rank 0 in a world of size ",
    "[c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.",
    "[gpu-c01][[1,1],2][btl_tcp_endpoint.c:638:mca_btl_tcp_endpoint_recv_connect_ack] received ",
    "NCCL INFO NET/Plugin: Could not find: libnccl-net.so NET/Socket : Using [0]hsn",
    "# job script exports:\n#   A=1 B=2 C=3 D=4 E=5 F=6 G=7 H=8 I=9 J=10 K=11 NCCL_IB_DISABLE",
    "# 1903110 1903562 ran the same recipe and failed; same nodes with X_degree 1 completed ",
    "Building extension module x... Fatal Python error: Illegal instruction Time to load x op: ",
    "# Ended (code 99999) at epoch:  1 Epoch 9 Epoch 1/2  train_loss ",
    "$ sacct -o JobID%1,A,B,C,D,E,F,G,H,I,J,K,L,M,N,O,P,Q,R, srun --ntasks-per-node=",
    "[  1/2]    Time  1.0 ( 1.0  Time  9.9 (  [9/9] lr ",
    "sigkill_handler] Killing subprocess 99999999999 exits with return code = -9 ",
    "slurmstepd: error: mpi/pmix: ERROR: spank: Failed to open  "
    "FileExistsError: [Errno 17] File exists: '/",
    "# no output printed nothing for ~ makes no further progress no step has been ever ",
    "# all jobs failed; in each case every one of the crashes gpu-c01 gpu-c0 ",
    "|   0  A100 " + "x" * 70 + " | 0000:0",  # an nvidia-smi row cut short
    # session 20's readers: a file missing on some nodes (node_drift)
    "ls: cannot access '/usr/lib/x.so': No such file or directory\n/usr/lib/x.so -> /usr/lib/",
    "# the same kind of failure happened repeatedly on several different cloud a b c d e ",
    "destroy_process_group() was not called before program exit recvValue failed ",
    "# fails on every attempt on this GPU; it runs to completion on other machines on ",
    "perf/mfu/actor:0.1 # same configuration reports perf/mfu/actor around 0.",
    "all_reduce_perf -g 4 hangs; on gpu-c01 xxxxxxxx yyyyyyyy trains normally on gpu-c0",
    "# sbatch --nodes=1 -N 1 node node1 nodes=a1 allocation: b2 node ",
    "# the run fails with a b c d e f g h CUDA out-of-memor ends in the ",
]
NODES = ["gpu-c01", "gpu-c02"]


def _filled(fragment: str, kib: int = 8) -> str:
    return (fragment * (kib * 1024 // len(fragment) + 1))[: kib * 1024]


# A failed job (the readers behind a verdict's refinement run only on one), whose peers' last
# words name a network error: every node join is asked.
ENDING = (
    "1: gpu-c02:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.1.0.21<1> with status=12\n"
    "srun: error: gpu-c02: task 1: Exited with exit code 1\n"
)
FAILED = "JobId=41 JobName=t\n   JobState=FAILED Reason=NonZeroExitCode\n   NodeList=gpu-c[01-02]\n"
# A running job (the straggler readers and the operators' notes of rates run only on one).
RUNNING = "JobId=41 JobName=t\n   JobState=RUNNING Reason=None\n   NodeList=gpu-c[01-02]\n"


def _no_failure(job: str, node_text: str) -> None:
    files = {"dmesg_gpu-c02": node_text, "node_gpu-c02": node_text}
    for ending, scheduler in (("", ""), (ENDING, FAILED), ("", RUNNING)):
        a = attribute_text(job + ending, NODES, files, scheduler=scheduler)
        assert "attribution failed" not in a.summary, a.summary


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=range(len(FRAGMENTS)))
def test_a_readers_fragment_filling_every_line_is_attributed(fragment: str) -> None:
    lines = "\n".join(_filled(fragment) for _ in range(20)) + "\n"
    _no_failure(lines, lines)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.integers(1, 40),
                          st.sampled_from(["", "0: ", "[rank3]: ", "\n"])),
                min_size=1, max_size=30))  # fmt: skip
def test_mixes_of_the_readers_fragments_are_attributed(
    parts: list[tuple[str, int, str]],
) -> None:
    text = "".join(prefix + fragment * times + "\n" for fragment, times, prefix in parts)
    _no_failure(text, text)
