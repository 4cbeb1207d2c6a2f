# ruff: noqa: E501  (real kernel lines are long)
"""Whose memory a kernel OOM report was about (resurgo.attribute.oom_blocks).

The lines follow Linux mm/oom_kill.c (dump_header, dump_tasks, oom_kill_process) and
mm/memcontrol.c, as a memcg OOM of a Slurm task cgroup prints them (a real run's kernel log).
"""

from __future__ import annotations

from resurgo.attribute.oom_blocks import read_blocks
from resurgo.contracts import LogLine

MEMCG_OOM = [
    "[Sat Dec  5 05:04:06 2026] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "[Sat Dec  5 05:04:06 2026] memory: usage 716800kB, limit 716800kB, failcnt 120",
    "[Sat Dec  5 05:04:06 2026] Memory cgroup stats for /slurm/uid_0/job_10/step_0/task_1:",
    "[Sat Dec  5 05:04:06 2026] Tasks state (memory values in pages):",
    "[Sat Dec  5 05:04:06 2026] [  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents oom_score_adj name",
    "[Sat Dec  5 05:04:06 2026] [  27047]     0 27047   336192   200793   178653    22140         0  1949696        0             0 python",
    "[Sat Dec  5 05:04:06 2026] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/slurm/uid_0/job_10/step_0/task_1,task_memcg=/slurm/uid_0/job_10/step_0/task_1,task=python,pid=27047,uid=0",
    "[Sat Dec  5 05:04:06 2026] Memory cgroup out of memory: Killed process 27047 (python) total-vm:1344768kB, anon-rss:714612kB, file-rss:88560kB, shmem-rss:0kB, UID:0 pgtables:1904kB oom_score_adj:0",
    "[Sat Dec  5 05:04:06 2026] oom_reaper: reaped process 27047 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
]

GLOBAL_OOM = [
    "[Sat Dec  5 05:11:37 2026] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "[Sat Dec  5 05:11:37 2026] Tasks state (memory values in pages):",
    "[Sat Dec  5 05:11:37 2026] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[Sat Dec  5 05:11:37 2026] [   1102]     0  1102    24371     1402   204800        0         -1000 sshd",
    "[Sat Dec  5 05:11:37 2026] [  77121] 41234 77121 98211741 93122817 752312320        0             0 python3",
    "[Sat Dec  5 05:11:37 2026] [  88410] 43017 88410 17301210 16412200 133214208        0             0 python",
    "[Sat Dec  5 05:11:37 2026] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/slurmstepd.scope/job_671120/step_0/user/task_0,task=python,pid=88410,uid=43017",
    "[Sat Dec  5 05:11:37 2026] Out of memory: Killed process 88410 (python) total-vm:69204840kB, anon-rss:65648800kB, file-rss:0kB, shmem-rss:0kB, UID:43017 pgtables:130092kB oom_score_adj:0",
]


def _lines(texts: list[str]) -> list[LogLine]:
    return [LogLine(source="dmesg_n1.txt", line_no=i + 1, text=t) for i, t in enumerate(texts)]


def test_memcg_report_names_its_job_and_ends_with_the_reaper() -> None:
    (block,) = read_blocks("dmesg_n1.txt", _lines(MEMCG_OOM))
    assert block.jobs == {10}
    assert (block.first, block.last) == (1, 9)
    assert block.of_another_job(9) and not block.of_another_job(10)
    assert block.of_this_job(10)
    assert not block.held_by_another_user()  # a cgroup's own limit: nobody else's memory


def test_global_oom_held_by_another_users_process() -> None:
    (block,) = read_blocks("dmesg_n1.txt", _lines(GLOBAL_OOM))
    assert block.constraint == "CONSTRAINT_NONE"
    assert block.killed_pid == 88410 and block.killed_uid == 43017
    assert block.held_by_another_user()


def test_global_oom_of_the_jobs_own_processes() -> None:
    own = [t for t in GLOBAL_OOM if "77121" not in t]
    (block,) = read_blocks("dmesg_n1.txt", _lines(own))
    assert not block.held_by_another_user()
    assert not block.of_another_job(671120)


def test_no_job_in_the_report_is_nobody_elses() -> None:
    plain = [t for t in GLOBAL_OOM if "oom-kill:" not in t]
    (block,) = read_blocks("dmesg_n1.txt", _lines(plain))
    assert not block.jobs and not block.of_another_job(1)
