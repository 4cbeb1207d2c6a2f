"""A file missing on some of the job's nodes and present on another: those nodes' software,
named and excluded. And a task that merely exited first, with nothing said anywhere, names no
node. Lines as coreutils' ls prints them on the nodes of NVIDIA/pyxis#29."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

NODES = ["tcn1189", "tcn1190", "tcn1191", "tcn1192"]
JOB = """\
# job 31877: srun -N 4 --container-image=/home/user/tmp/enroot/petsc.sqsh python3 -m mpi4py solve.py
tcn1190: PRETTY_NAME="Red Hat Enterprise Linux Server 7.7 (Maipo)"
tcn1192: PRETTY_NAME="Ubuntu 18.04.4 LTS"
tcn1189: /usr/bin/python3: No module named mpi4py
tcn1190: /usr/bin/python3: No module named mpi4py
tcn1191: /usr/bin/python3: No module named mpi4py
srun: error: tcn1189: task 0: Exited with exit code 1
srun: error: tcn1190: task 1: Exited with exit code 1
srun: error: tcn1191: task 2: Exited with exit code 1
"""
CHECK = "$ ssh {n} 'grep -r pyxis /etc/slurm/plugstack.conf.d/; ls /usr/local/lib/slurm/spank_pyxis.so'\n"
LACKS = "ls: cannot access /usr/local/lib/slurm/spank_pyxis.so: No such file or directory\n"
HAS = (
    "/etc/slurm/plugstack.conf.d/pyxis.conf:required /usr/local/lib/slurm/spank_pyxis.so\n"
    "/usr/local/lib/slurm/spank_pyxis.so\n"
)


def _files(having: str = "tcn1192", lacks: str = LACKS) -> dict[str, str]:
    return {f"node_{n}": CHECK.format(n=n) + (HAS if n == having else lacks) for n in NODES}


def test_the_nodes_lacking_a_plugin_another_node_has_are_excluded() -> None:
    a = attribute_text(JOB, NODES, _files())
    assert a.category == Category.SYSTEM_SOFTWARE, a.summary
    assert a.culprit_nodes == ["tcn1189", "tcn1190", "tcn1191"]
    assert first_action(a) == "requeue_excluding_nodes"
    assert "spank_pyxis.so is missing" in a.summary


def test_quoted_paths_of_newer_coreutils_and_an_ls_l_listing_read_the_same() -> None:
    quoted = "ls: cannot access '/usr/local/lib/slurm/spank_pyxis.so': No such file or directory\n"
    files = _files(lacks=quoted)
    files["node_tcn1192"] = (
        CHECK.format(n="tcn1192")
        + "-rwxr-xr-x 1 root root 61464 Oct  2 09:12 /usr/local/lib/slurm/spank_pyxis.so\n"
    )
    a = attribute_text(JOB, NODES, files)
    assert a.culprit_nodes == ["tcn1189", "tcn1190", "tcn1191"], a.summary


def test_a_file_missing_everywhere_leaves_nothing_to_exclude() -> None:
    a = attribute_text(JOB, NODES, _files(having="nobody"))
    assert a.category != Category.SYSTEM_SOFTWARE or not a.culprit_nodes, a.summary
    assert first_action(a) != "requeue_excluding_nodes"


def test_the_command_naming_the_path_is_no_sign_the_file_is_there() -> None:
    files = _files()
    files["node_tcn1192"] = CHECK.format(n="tcn1192") + "# (output not kept)\n"
    a = attribute_text(JOB, NODES, files)
    assert a.culprit_nodes == [], a.summary
    assert first_action(a) == "requeue"


def test_the_first_task_to_exit_without_a_word_names_no_node() -> None:
    job = "0: 1: loss: 5.9310\nsrun: error: a100-s03: task 0: Exited with exit code 1\n"
    a = attribute_text(job, ["a100-s03", "a100-s04"], {})
    assert (a.category, a.culprit_nodes) == (Category.UNKNOWN, []), a.summary
    assert first_action(a) == "requeue"
    assert "a100-s03" in a.summary  # (the record still says which task went first, and where)


# One node's GPUs, a DDP job whose first collective never completes (Lightning on gn07, whose
# driver alone was upgraded: NCCL P2P hangs there; lines as nvidia-smi and nccl-tests print them).
HANG = (
    "[rank1]:[E209 10:41:52.118 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.\n"
    "srun: error: gn07: task 0: Aborted (core dumped)\n"
)
CHECKS = (
    "$ nvidia-smi | head -4\n"
    "| NVIDIA-SMI 545.23.08              Driver Version: 545.23.08    CUDA Version: 12.3     |\n"
    "# on gn07: all_reduce_perf -g 4 hangs at the first size; with NCCL_P2P_DISABLE=1 it completes\n"
)
ELSEWHERE = "# the same Lightning job on gn05 (535.154.05) trains normally\n"


def test_a_collective_benchmark_hanging_on_the_node_while_the_job_runs_elsewhere_is_its_software() -> (
    None
):
    a = attribute_text(HANG, ["gn07"], {"node_gn07": CHECKS + ELSEWHERE})
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.SYSTEM_SOFTWARE, ["gn07"]), (
        a.summary
    )
    assert first_action(a) == "requeue_excluding_nodes"


def test_without_the_job_running_elsewhere_the_benchmark_hang_names_nothing() -> None:
    a = attribute_text(HANG, ["gn07"], {"node_gn07": CHECKS})
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.UNKNOWN, []), a.summary
