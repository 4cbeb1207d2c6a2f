"""Scale: how much one worker and one controller cost per monitored job, and whether detection
stays fast, at 100, 300 and 1,000 jobs watched at once.

    .venv/bin/python bench/scale.py [--sizes 100,300,1000] [--faults 20] [--window 60]
    .venv/bin/python bench/scale.py --array 1000 [--window 60]   # array vs single jobs

Everything is real: a throw-away Slurm cluster `scale` (4 nodes declaring enough CPUs for every
job, its own ports, purged afterwards), the Temporal dev server, one `resurgo worker` and one
`resurgo controller` process, and real opted-in Slurm jobs in observe mode. Each job is a cheap
bash sleeper printing a Megatron-style progress line every 2 s into its own output file.

At each size, once every job has a workflow that has seen its progress:
- a steady window (`--window` s): CPU of the worker, the controller (with the scontrol/squeue
  it runs), the Temporal server and slurmctld, as % of one core; worker and controller RSS, and
  RSS per job above the idle processes measured before the first job;
- Temporal history: events per job so far (startup), and events per job-hour during the window
  (all runs of each workflow, from visibility's history length; 20 sampled jobs);
- detection: `--faults` running jobs, one every 0.5 s, write a CUDA illegal-address line and exit;
  latency = that line's write time (the job stamps it) → the anomaly's audit event (workflow
  time). The faulted jobs are replaced before the next size.

Prints one table; exits 1 if p99 detection at the largest size is above 5 s or a per-job cost
(CPU, RSS) grows more than 1.5x from the smallest size to the largest.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from resurgo.devstack.devserver import start_dev_server  # noqa: E402
from resurgo.devstack.localstack import LocalStack, wait_for, write_config  # noqa: E402

CLUSTER = "scale"
CTLD_PORT, BASE_PORT, NODES = 6857, 17501, 4
TEMPORAL_PORT, UI_PORT = 7453, 8453
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

SLEEPER = r"""#!/bin/bash
# A cheap monitored job: a progress line every 2 s; on its trigger file, one fatal line and exit.
exec 3<> <(:)   # a pipe nobody writes: `read -t` on it sleeps without forking
fmt=' iteration %8d/ 10000000 | consumed samples: %d |'
fmt+=' elapsed time per iteration (ms): 2000.0 | lm loss: 2.500000E+00 |\n'
i=0
while :; do
    i=$((i + 1))
    # shellcheck disable=SC2059
    printf "$fmt" "$i" "$((i * 8))"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        if [[ -e $TRIGGER_DIR/$SLURM_JOB_ID ]]; then
            t=$(date +%s.%N)
            echo "RuntimeError: CUDA error: an illegal memory access was encountered"
            echo "$t" > "$TRIGGER_DIR/$SLURM_JOB_ID.written"
            exit 1
        fi
        read -t 0.2 -u 3
    done
done
"""


def use_instance(k: int) -> None:
    """Cluster `scale<k>` and every port moved by 100*k: two benches on one host must not share
    a cluster (each purges its own at the end) or a Temporal server."""
    global CLUSTER, CTLD_PORT, BASE_PORT, TEMPORAL_PORT, UI_PORT
    CLUSTER = f"scale{k}"
    CTLD_PORT, BASE_PORT = CTLD_PORT + 100 * k, BASE_PORT + 100 * k
    TEMPORAL_PORT, UI_PORT = TEMPORAL_PORT + 100 * k, UI_PORT + 100 * k


def start_cluster(cpus: int) -> str:
    env = dict(os.environ, CLUSTER=CLUSTER, NODES=str(NODES), CPUS=str(cpus),
               CTLD_PORT=str(CTLD_PORT), BASE_PORT=str(BASE_PORT))  # fmt: skip
    out = subprocess.run(
        ["bash", str(REPO / "infra/slurm/start.sh"), "--resume-nodes"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    return [ln for ln in out.splitlines() if ln.startswith("SLURM_CONF=")][-1][11:]


def purge_cluster() -> None:
    env = dict(os.environ, CLUSTER=CLUSTER)
    subprocess.run(["bash", str(REPO / "infra/slurm/stop.sh"), "--purge"], env=env,
                   capture_output=True, check=False)  # fmt: skip


class ProfiledStack(LocalStack):
    """The worker and controller under cProfile (bench/profiled.py), profiles in the work dir."""

    def command(self, component: str, cluster: str | None = None) -> list[str]:
        argv = super().command(component, cluster)
        at = argv.index("-m") + 1
        prefix = str(self.logdir.parent / f"profile-{component}")
        return [*argv[:at], "bench.profiled", prefix, *argv[at:]]


@dataclass
class Proc:
    name: str
    pid: int

    def cpu_seconds(self) -> float:
        """User + system time of the process and of its waited-for children (scontrol, squeue)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return math.nan
        return sum(int(v) for v in fields[11:15]) / TICK

    def rss_mb(self) -> float:
        try:
            pages = int(Path(f"/proc/{self.pid}/statm").read_text().split()[1])
        except OSError:
            return math.nan
        return pages * PAGE / 2**20


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="resurgo-scale-"))
        (self.work / "out").mkdir()
        self.triggers = self.work / "triggers"
        self.triggers.mkdir()
        self.script = self.work / "sleeper.sh"
        self.script.write_text(SLEEPER)
        self.env_name = f"scale{os.getpid()}"
        self.db = self.work / "audit.db"
        self.jobs: list[int] = []
        self.rng = random.Random(args.seed)

    # -- setup ----------------------------------------------------------------------------

    def start(self) -> None:
        largest = max(self.args.sizes)
        cpus = math.ceil((largest + self.args.faults) * 1.1 / NODES)
        self.conf = start_cluster(cpus)
        self.server = start_dev_server(
            port=TEMPORAL_PORT, ui_port=UI_PORT, db_file=str(self.work / "temporal.db"),
            log_file=str(self.work / "temporal.log"),
            # A throw-away store: WAL lets visibility reads run beside 1,000 workflows' writes,
            # where the default journal's lock contention failed the namespace lookups
            # (temporalio/temporal#3784; the TS SDK's stress tests run the dev server so).
            pragmas=("journal_mode=WAL", "synchronous=OFF"),
        )  # fmt: skip
        if self.server is None:
            raise SystemExit(f"port {TEMPORAL_PORT} is taken: stop whatever listens there")
        config = write_config(
            self.work / "resurgo.toml", temporal_address=f"127.0.0.1:{TEMPORAL_PORT}",
            audit_url=f"sqlite:///{self.db}", cluster=self.env_name, slurm_conf=self.conf,
            acknowledge=False, environment=self.env_name, discovery_interval=2.0,
        )  # fmt: skip
        stack = ProfiledStack if self.args.profile else LocalStack
        self.stack = stack(config=config, logdir=self.work / "logs", cluster=self.env_name)
        self.stack.start_all()
        ctld_pid = Path(f"/var/lib/resurgo-slurm/{CLUSTER}/run/slurmctld.pid")
        self.procs = [
            Proc("worker", self.stack.procs["worker"].pid),
            Proc("controller", self.stack.procs["controller"].pid),
            Proc("temporal", self.server.pid),
            Proc("slurmctld", int(ctld_pid.read_text().strip())),
        ]
        wait_for(self.db.exists, 60, what="the audit store")

    def profile_window(self) -> None:
        """With --profile: end the worker's and controller's current profile window."""
        if self.args.profile:
            for name in ("worker", "controller"):
                os.kill(self.stack.procs[name].pid, signal.SIGUSR1)

    def stop(self) -> None:
        if hasattr(self, "stack"):
            self.stack.stop_all()
        if getattr(self, "server", None) is not None:
            self.server.terminate()  # type: ignore[union-attr]
            self.server.wait(timeout=30)  # type: ignore[union-attr]
        if hasattr(self, "conf"):
            # Stopping slurmd leaves a running job's script behind (proctrack/linuxproc), and
            # the sleeper never ends on its own: cancel every job of this cluster first.
            with contextlib.suppress(subprocess.CalledProcessError, TimeoutError):
                self.slurm("scancel", f"--user={os.getuid()}")
                wait_for(lambda: not self.slurm("squeue", "-h", "-t", "running,completing"), 60,
                         interval=1.0, what="the cluster's jobs to end")  # fmt: skip
        purge_cluster()

    def slurm(self, *argv: str) -> str:
        env = dict(os.environ, SLURM_CONF=self.conf, TRIGGER_DIR=str(self.triggers))
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        return done.stdout

    def submit(self, count: int) -> None:
        comment = json.dumps({"resurgo": {"mode": "observe", "environment": self.env_name}})

        def one(_: int) -> int:
            out = self.slurm("sbatch", "--parsable", "-N1", "-n1", f"--comment={comment}",
                             f"--output={self.work}/out/%j.out", "--job-name=sleeper",
                             str(self.script))  # fmt: skip
            return int(out.strip().split(";")[0])

        with ThreadPoolExecutor(4) as pool:
            self.jobs += list(pool.map(one, range(count)))

    # -- measuring ------------------------------------------------------------------------

    def audit(self, kind: str) -> dict[int, datetime]:
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute(
                "SELECT job_id, MIN(at) FROM audit_events WHERE cluster = ? AND type = ? "
                "GROUP BY job_id", (self.env_name, kind),
            ).fetchall()  # fmt: skip
        return {job: datetime.fromisoformat(at).replace(tzinfo=UTC) for job, at in rows}

    def wait_monitored(self, timeout: float) -> float:
        started = time.monotonic()
        wanted = set(self.jobs)

        def all_seen() -> bool:
            return wanted <= set(self.audit("progress"))

        wait_for(all_seen, timeout, interval=2.0, what=f"progress of {len(wanted)} jobs")
        return time.monotonic() - started

    async def history_events(self, client: Client, jobs: list[int]) -> int:
        """Events in every run (continue-as-new included) of these jobs' workflows."""
        total = 0
        for job in jobs:
            query = f'ResurgoCluster = "{self.env_name}" AND ResurgoSlurmJobId = "{job}"'
            async for execution in client.list_workflows(query):
                handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
                total += len((await handle.fetch_history()).events)
        return total

    def sample(self) -> tuple[dict[str, float], dict[str, float]]:
        return ({p.name: p.cpu_seconds() for p in self.procs},
                {p.name: p.rss_mb() for p in self.procs})  # fmt: skip

    def inject(self, count: int) -> list[float]:
        victims = self.rng.sample(self.jobs, count)
        for job in victims:
            (self.triggers / str(job)).touch()
            time.sleep(0.5)
        deadline = time.monotonic() + 120
        latencies: dict[int, float] = {}
        while len(latencies) < count and time.monotonic() < deadline:
            anomalies = self.audit("anomaly")
            for job in victims:
                stamp = self.triggers / f"{job}.written"
                if job in latencies or job not in anomalies or not stamp.exists():
                    continue
                text = stamp.read_text().strip()
                if not text:
                    continue
                written = datetime.fromtimestamp(float(text), UTC)
                latencies[job] = (anomalies[job] - written).total_seconds()
            time.sleep(0.5)
        missing = sorted(set(victims) - set(latencies))
        if missing:
            raise SystemExit(f"no anomaly recorded within 120 s for jobs {missing}")
        self.jobs = [j for j in self.jobs if j not in victims]
        return sorted(latencies.values())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


async def run(args: argparse.Namespace) -> list[dict[str, float]]:
    bench = Bench(args)
    rows: list[dict[str, float]] = []
    console = Console(stderr=True)
    try:
        bench.start()
        client = await Client.connect(f"127.0.0.1:{TEMPORAL_PORT}")
        time.sleep(5)
        cpu0, idle_rss = bench.sample()
        time.sleep(args.window / 2)
        cpu1, idle_rss = bench.sample()
        idle_cpu = {k: (cpu1[k] - cpu0[k]) / (args.window / 2) * 100 for k in cpu0}
        console.log(f"idle: cpu {idle_cpu}, rss {idle_rss}")
        for size in args.sizes:
            bench.submit(size - len(bench.jobs))
            took = bench.wait_monitored(timeout=120 + size * 0.6)
            console.log(f"{size} jobs monitored after {took:.0f}s; steady window {args.window}s")
            sampled = bench.rng.sample(bench.jobs, min(20, len(bench.jobs)))
            events0 = await bench.history_events(client, sampled)
            cpu_a, _ = bench.sample()
            t0 = time.monotonic()
            time.sleep(args.window)
            cpu_b, rss = bench.sample()
            elapsed = time.monotonic() - t0
            events1 = await bench.history_events(client, sampled)
            cpu = {k: (cpu_b[k] - cpu_a[k]) / elapsed * 100 for k in cpu_a}
            latencies = bench.inject(args.faults)
            rows.append({
                "jobs": size,
                **{f"cpu_{k}": v for k, v in cpu.items()},
                "rss_worker": rss["worker"], "rss_controller": rss["controller"],
                "kb_per_job": (rss["worker"] + rss["controller"] - idle_rss["worker"]
                               - idle_rss["controller"]) * 1024 / size,
                "events_startup": events0 / len(sampled),
                "events_per_job_hour": (events1 - events0) / len(sampled) / elapsed * 3600,
                "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99), "max": latencies[-1],
            })  # fmt: skip
            console.log(rows[-1])
        return rows
    finally:
        bench.stop()
        console.log(f"logs kept in {bench.work}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,300,1000",
                        type=lambda s: sorted(int(x) for x in s.split(",")))  # fmt: skip
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--instance", type=int, default=0, metavar="K",
                        help="run as cluster scale<K> on ports +100*K (another bench on this "
                             "host uses the defaults)")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="run worker and controller under cProfile: one profile per steady "
                             "window in the work dir (adds its own CPU)")  # fmt: skip
    parser.add_argument("--array", type=int, default=0, metavar="N",
                        help="instead: an N-task array against N single jobs "
                             "(bench/scale_arrays.py)")  # fmt: skip
    args = parser.parse_args()
    if args.instance:
        use_instance(args.instance)
    if args.array:
        from bench.scale_arrays import compare, report

        return report(*asyncio.run(compare(args)))
    rows = asyncio.run(run(args))

    table = Table(title="Resurgo at scale: one worker + one controller (CPU in % of one core)")
    columns = ["jobs", "worker CPU", "controller CPU", "Temporal CPU", "slurmctld CPU",
               "worker RSS MB", "ctl RSS MB", "RSS KB/job", "CPU/job vs first",
               "events/job startup", "events/job-hour", "p50 s", "p99 s", "max s"]  # fmt: skip
    for name in columns:
        table.add_column(name, justify="right")
    first = rows[0]

    def per_job_cpu(row: dict[str, float]) -> float:
        return (row["cpu_worker"] + row["cpu_controller"]) / row["jobs"]

    for row in rows:
        table.add_row(
            f"{row['jobs']:.0f}", f"{row['cpu_worker']:.1f}", f"{row['cpu_controller']:.1f}",
            f"{row['cpu_temporal']:.1f}", f"{row['cpu_slurmctld']:.1f}",
            f"{row['rss_worker']:.0f}", f"{row['rss_controller']:.0f}",
            f"{row['kb_per_job']:.0f}", f"{per_job_cpu(row) / per_job_cpu(first):.2f}x",
            f"{row['events_startup']:.1f}", f"{row['events_per_job_hour']:.1f}",
            f"{row['p50']:.2f}", f"{row['p99']:.2f}", f"{row['max']:.2f}",
        )  # fmt: skip
    Console(width=200).print(table)
    last = rows[-1]
    failed = []
    if last["p99"] > 5.0:
        failed.append(f"p99 detection {last['p99']:.2f}s > 5 s at {last['jobs']:.0f} jobs")
    if len(rows) > 1 and per_job_cpu(last) > 1.5 * per_job_cpu(first):
        failed.append("CPU per job grew more than 1.5x")
    if len(rows) > 1 and last["kb_per_job"] > 1.5 * first["kb_per_job"]:
        failed.append("RSS per job grew more than 1.5x")
    for line in failed:
        print("MISSED:", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
