"""Scale, arrays: an N-task job array against N single jobs (`bench/scale.py --array N`).

Same real stack as bench/scale.py (throw-away Slurm cluster, Temporal dev server, one worker,
one controller, observe mode, the same sleeper job). In order:

1. N single jobs: once every one has a workflow that has seen its progress, a steady window
   (`--window` s) measures CPU of each process, worker + controller RSS above idle, and
   Temporal history events per job (startup and per job-hour, 20 sampled jobs);
2. they are cancelled and their workflows left to end, and slurmctld is made to forget them
   (MinJobAge lowered on this throw-away cluster, then waited out): every watch and discovery
   round reads slurmctld's whole listing, so N finished records left in it would make each read
   of the array's run twice the single jobs' (measured: that alone was the array's 1.26-1.29x
   controller CPU and 1.4-1.6x slurmctld CPU at N = 200);
3. one N-task array of the same job: the same measurements (the coordinator's events are
   counted too, spread over the tasks);
4. a second N-task array submitted held (every task pending): the workflows discovery starts
   for it within 10 discovery rounds are counted (the issue: not one per pending task).

The array runs second, after N workflows have come and gone in the same processes: RSS is the
array's cost plus whatever the single jobs left behind, so the comparison leans against it.
Both rows show the records slurmctld held during the window (`jobs listed`), which must match.
Prints both rows and the array/single ratio; exits 1 when the array costs more than 1.25x the
single jobs per task (CPU of worker + controller, history events per job-hour) or any workflow
is started per pending task.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from bench import scale
from bench.scale import Bench
from resurgo.devstack.localstack import wait_for

# Over this, "no more than N single jobs" is missed (measurement noise on a shared machine).
TOLERANCE = 1.25
HELD_ROUNDS = 10


def monitored_within(n: int) -> float:
    """Seconds for N jobs to be monitored: generous, start-up is not what is compared (under a
    load average of 8-10 from other work, 1,000 single jobs took more than 120 + 0.6 s each)."""
    return 300 + n * 1.5


class ArrayBench(Bench):
    def submit_array(self, count: int, held: bool = False) -> int:
        comment = json.dumps({"resurgo": {"mode": "observe", "environment": self.env_name}})
        out = self.slurm(
            "sbatch", "--parsable", "-N1", "-n1", f"--array=0-{count - 1}",
            f"--comment={comment}", f"--output={self.work}/out/%A_%a.out",
            "--job-name=sleeper-array", *(["--hold"] if held else []), str(self.script),
        )  # fmt: skip
        return int(out.strip().split(";")[0])

    def listed(self) -> int:
        """Job records slurmctld holds (any state; an array's unstarted tasks are one)."""
        return len(self.slurm("squeue", "-h", "-t", "all", "-o", "%i").split())

    def forget_finished(self, timeout: float) -> None:
        """Make slurmctld purge the finished jobs now (MinJobAge is an hour on these clusters):
        lower MinJobAge in this throw-away cluster's slurm.conf, reconfigure, and wait until
        no record is left (slurmctld purges about once a minute)."""
        conf = Path(self.conf)
        conf.write_text(re.sub(r"(?m)^MinJobAge=\d+$", "MinJobAge=2", conf.read_text()))
        self.slurm("scontrol", "reconfigure")
        wait_for(lambda: self.listed() == 0, timeout, interval=2.0,
                 what="slurmctld to purge the cancelled jobs")  # fmt: skip

    def tasks_monitored(self, array_id: int) -> int:
        with sqlite3.connect(self.db) as conn:
            (count,) = conn.execute(
                "SELECT COUNT(DISTINCT workflow_id) FROM audit_events WHERE cluster = ? AND "
                "type = 'progress' AND workflow_id LIKE ? ESCAPE '\\'",
                (self.env_name, f"resurgo:{self.env_name}:{array_id}\\_%"),
            ).fetchone()  # fmt: skip
        return int(count)

    async def running(self, client: Client, workflow_type: str | None = None) -> int:
        query = f'ResurgoCluster = "{self.env_name}" AND ExecutionStatus = "Running"'
        if workflow_type:
            query += f' AND WorkflowType = "{workflow_type}"'
        return (await client.count_workflows(query)).count

    async def started(self, client: Client) -> int:
        return (await client.count_workflows(f'ResurgoCluster = "{self.env_name}"')).count

    async def history_of(self, client: Client, refs: list[str]) -> int:
        """Events in every run of the workflows of these jobs (`123` or `500_7`)."""
        total = 0
        for ref in refs:
            query = f'ResurgoCluster = "{self.env_name}" AND ResurgoSlurmJobId = "{ref}"'
            async for execution in client.list_workflows(query):
                handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
                total += len((await handle.fetch_history()).events)
        return total


async def window(
    bench: ArrayBench, client: Client, refs: list[str], size: int, idle_rss: dict[str, float],
    extra: list[str] | None = None,
) -> dict[str, float]:  # fmt: skip
    """One steady window: CPU by process, RSS above idle per job, history events per job.
    `extra`: workflows whose events count too (the array's coordinator), spread over `size`."""
    sampled = bench.rng.sample(refs, min(20, len(refs)))
    events0 = await bench.history_of(client, sampled)
    shared0 = await bench.history_of(client, extra or [])
    bench.profile_window()  # start-up and the history reads above: not the window's
    cpu_a, _ = bench.sample()
    t0 = time.monotonic()
    time.sleep(bench.args.window)
    cpu_b, rss = bench.sample()
    bench.profile_window()
    elapsed = time.monotonic() - t0
    listed = bench.listed()
    events1 = await bench.history_of(client, sampled)
    shared1 = await bench.history_of(client, extra or [])
    per_job0 = events0 / len(sampled) + shared0 / size
    per_job1 = events1 / len(sampled) + shared1 / size
    return {
        "jobs": size,
        "listed": listed,
        **{f"cpu_{k}": (cpu_b[k] - cpu_a[k]) / elapsed * 100 for k in cpu_a},
        "rss_worker": rss["worker"], "rss_controller": rss["controller"],
        "kb_per_job": (rss["worker"] + rss["controller"] - idle_rss["worker"]
                       - idle_rss["controller"]) * 1024 / size,
        "events_startup": per_job0,
        "events_per_job_hour": (per_job1 - per_job0) / elapsed * 3600,
    }  # fmt: skip


async def compare(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float], int]:
    n = args.array
    args.sizes, args.faults = [n], 0
    if args.instance:  # bench.scale as imported here, not the __main__ that parsed the args
        scale.use_instance(args.instance)
    bench = ArrayBench(args)
    console = Console(stderr=True)
    try:
        bench.start()
        client = await Client.connect(f"127.0.0.1:{scale.TEMPORAL_PORT}")
        time.sleep(5)
        _, idle_rss = bench.sample()
        console.log(f"idle rss {idle_rss}")

        bench.submit(n)
        took = bench.wait_monitored(timeout=monitored_within(n))
        console.log(f"{n} single jobs monitored after {took:.0f}s")
        single = await window(bench, client, [str(j) for j in bench.jobs], n, idle_rss)
        single["workflows"] = await bench.running(client)
        console.log({"single": single})

        bench.slurm("scancel", *[str(j) for j in bench.jobs])
        bench.jobs = []
        await _until(lambda: bench.running(client, "JobRecoveryWorkflow"), 0, monitored_within(n))
        bench.forget_finished(timeout=240)
        console.log("the cancelled jobs are purged from slurmctld")

        array_id = bench.submit_array(n)
        started = time.monotonic()
        wait_for(lambda: bench.tasks_monitored(array_id) >= n, monitored_within(n), interval=2.0,
                 what=f"progress of {n} array tasks")  # fmt: skip
        console.log(f"{n}-task array monitored after {time.monotonic() - started:.0f}s")
        refs = [f"{array_id}_{t}" for t in range(n)]
        array = await window(bench, client, refs, n, idle_rss,
                             extra=[str(array_id)])  # the coordinator's own history  # fmt: skip
        array["workflows"] = await bench.running(client)
        console.log({"array": array})

        before = await bench.started(client)
        bench.submit_array(n, held=True)
        time.sleep(HELD_ROUNDS * 2.0)  # discovery_interval is 2 s
        per_pending = await bench.started(client) - before
        console.log(f"workflows started for a held {n}-task array: {per_pending}")
        bench.slurm("scancel", "--name=sleeper-array")
        return single, array, per_pending
    finally:
        bench.stop()
        console.log(f"logs kept in {bench.work}")


async def _until(probe: Any, value: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (current := await probe()) != value:
        if time.monotonic() > deadline:
            raise SystemExit(f"still {current} running workflows after {timeout:.0f}s")
        time.sleep(2.0)


def report(single: dict[str, float], array: dict[str, float], per_pending: int) -> int:
    def per_job_cpu(row: dict[str, float]) -> float:
        return (row["cpu_worker"] + row["cpu_controller"]) / row["jobs"]

    n = int(single["jobs"])
    table = Table(title=f"{n}-task array vs {n} single jobs (CPU in % of one core)")
    columns = ["run", "jobs listed", "running workflows", "worker CPU", "controller CPU",
               "Temporal CPU", "slurmctld CPU", "worker RSS MB", "ctl RSS MB", "RSS KB/job",
               "events/job startup", "events/job-hour"]  # fmt: skip
    for name in columns:
        table.add_column(name, justify="right")
    keys = ["cpu_worker", "cpu_controller", "cpu_temporal", "cpu_slurmctld", "rss_worker",
            "rss_controller", "kb_per_job", "events_startup", "events_per_job_hour"]  # fmt: skip
    for label, row in ((f"{n} single jobs", single), (f"{n}-task array", array)):
        table.add_row(label, f"{row['listed']:.0f}", f"{row['workflows']:.0f}",
                      *(f"{row[k]:.1f}" for k in keys))  # fmt: skip
    ratio = [f"{array[k] / single[k]:.2f}x" if single[k] else "-" for k in keys]
    table.add_row("array / single", "", f"{array['workflows'] / single['workflows']:.2f}x",
                  *ratio)  # fmt: skip
    Console(width=240).print(table)
    print(f"worker + controller CPU per task (% of a core): single jobs "
          f"{per_job_cpu(single):.4f}, array {per_job_cpu(array):.4f}, "
          f"array / single {per_job_cpu(array) / per_job_cpu(single):.2f}x")  # fmt: skip
    print(f"workflows started for a held {n}-task array (all tasks pending): {per_pending}")
    failed = []
    if per_job_cpu(array) > TOLERANCE * per_job_cpu(single):
        failed.append(f"worker + controller CPU per task {per_job_cpu(array):.3f} > "
                      f"{TOLERANCE}x per single job {per_job_cpu(single):.3f}")  # fmt: skip
    if array["events_per_job_hour"] > TOLERANCE * single["events_per_job_hour"]:
        failed.append("history events per task-hour above the single jobs'")
    if array["listed"] != single["listed"]:
        failed.append(f"unequal listings: {single['listed']:.0f} vs {array['listed']:.0f} records")
    if per_pending > 1:  # its coordinator at most
        failed.append(f"{per_pending} workflows started for pending tasks")
    for line in failed:
        print("MISSED:", line)
    return 1 if failed or math.isnan(per_job_cpu(array)) else 0
