"""The demo trainer (infra/demo/trainer.py) for real: 2 local gloo ranks, no Slurm.

Each run launches two processes (RANK/WORLD_SIZE/MASTER_PORT env) with a tiny model, so a run
costs ~3 s, mostly importing torch and building DDP. Output-only faults (gpu_xid, nccl, ib) are
checked in-process.
"""

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "infra" / "demo"
TRAINER = DEMO / "trainer.py"
SMALL = ["--hidden", "256", "--batch", "64"]
PROGRESS_RE = re.compile(
    r"^ iteration +(\d+)/ +(\d+) \| elapsed time per iteration \(ms\): [\d.]+ \| "
    r"lm loss: (\S+) \|$",
    re.M,
)
START_RE = re.compile(
    r"^\[resurgo-demo\] rank=(\d) world=2 node=(\S+) pid=\d+ job=none restart=0$", re.M
)
SCRUB = ("SLURM", "RESURGO_", "TORCHELASTIC", "MASTER_", "GLOO_")
SCRUB_EXACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trainer() -> ModuleType:
    return _load("resurgo_demo_trainer", TRAINER)


@pytest.fixture(scope="module")
def submit() -> ModuleType:
    return _load("resurgo_demo_submit", DEMO / "submit.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    rc: list[int | None]
    out: list[str]
    elapsed: float

    def __str__(self) -> str:
        logs = "".join(f"\n--- rank{r} rc={self.rc[r]}\n{o}" for r, o in enumerate(self.out))
        return f"run took {self.elapsed:.1f}s{logs}"


def run_pair(
    tmp: Path,
    *args: str,
    env: dict[str, str] | None = None,
    nodes: tuple[str, str] | None = None,
    timeout: float = 40.0,
    hung_rank: int | None = None,
) -> Run:
    """Run 2 ranks to completion; ``hung_rank`` is killed once its peer has exited."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k not in SCRUB_EXACT}
    base.update({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    base.update(env or {})
    ckpt = ["--ckpt-dir", str(tmp / "ckpt")] if "--ckpt-dir" not in args else []
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp / f"rank{r}.{time.monotonic_ns()}.log" for r in (0, 1)]
    start = time.monotonic()
    for r in (0, 1):
        penv = dict(base, RANK=str(r), LOCAL_RANK=str(r))
        if nodes:
            penv["SLURMD_NODENAME"] = nodes[r]
        with open(logs[r], "wb") as fh:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(TRAINER), *SMALL, *ckpt, *args],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=penv,
                    cwd=tmp,
                )
            )
    try:
        for r, p in enumerate(procs):
            if r == hung_rank:
                continue
            p.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
        elapsed = time.monotonic() - start
        if hung_rank is not None:
            time.sleep(0.5)
            assert procs[hung_rank].poll() is None, "hung rank should still be blocked"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return Run(
        [p.returncode for p in procs], [f.read_text(errors="replace") for f in logs], elapsed
    )


def iterations(text: str) -> list[int]:
    return [int(m.group(1)) for m in PROGRESS_RE.finditer(text)]


# ----------------------------------------------------------------------------- healthy / resume
@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Run]]:
    tmp = tmp_path_factory.mktemp("healthy")
    yield tmp, run_pair(tmp, "--iters", "4", "--ckpt-every", "2", "--per-rank-timing")


def test_healthy_run_prints_progress_and_checkpoints(first_run: tuple[Path, Run]) -> None:
    tmp, run = first_run
    assert run.rc == [0, 0], run
    out0, out1 = run.out
    assert [int(m.group(1)) for m in START_RE.finditer(out0)] == [0], run
    assert [int(m.group(1)) for m in START_RE.finditer(out1)] == [1], run
    assert "[resurgo-demo] starting fresh" in out0 and "[resurgo-demo] starting fresh" in out1, run
    assert iterations(out0) == [1, 2, 3, 4], run
    assert iterations(out1) == [], run  # progress is rank 0 only
    assert all(m.group(2) == "4" for m in PROGRESS_RE.finditer(out0)), run
    for it in (2, 4):
        path = tmp / "ckpt" / f"iter_{it:07d}.pt"
        assert f"[resurgo-demo] checkpoint saved iteration={it} path={path}\n" in out0, run
        assert path.is_file(), run
    assert "[resurgo-demo] training complete iteration=4\n" in out0, run
    assert re.search(r"^\[rank1\] step=4 step_time_ms=[\d.]+ node=\S+$", out1, re.M), run
    assert not list((tmp / "ckpt").glob(".*tmp*")), "atomic save leaves no temp files"


def test_resume_from_checkpoint(first_run: tuple[Path, Run]) -> None:
    tmp, _ = first_run
    run = run_pair(tmp, "--iters", "6", "--ckpt-every", "2")
    assert run.rc == [0, 0], run
    for out in run.out:
        assert "[resurgo-demo] resumed from checkpoint iteration=4\n" in out, run
    assert iterations(run.out[0]) == [5, 6], run
    assert "[resurgo-demo] training complete iteration=6" in run.out[0], run


# ----------------------------------------------------------------------------- crash faults
def test_exception_on_rank1(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path,
        "--iters",
        "5",
        env={"RESURGO_FAULT": "exception", "RESURGO_FAULT_RANK": "1", "RESURGO_FAULT_AT": "2"},
    )
    assert run.rc[1] == 1 and run.rc[0] != 0, run
    assert "Traceback (most recent call last):" in run.out[1], run
    assert "ValueError: bad batch shape at iteration 2" in run.out[1], run
    assert "ValueError" not in run.out[0], run  # the peer only sees the cascade
    assert iterations(run.out[0]) == [1], run


def test_sigkill(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path, "--iters", "5", "--fault", "sigkill", "--fault-rank", "1", "--fault-at", "2"
    )
    assert run.rc[1] == -signal.SIGKILL, run
    assert run.rc[0] not in (0, None), run


def test_segfault(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path, "--iters", "5", env={"RESURGO_FAULT": "segfault", "RESURGO_FAULT_AT": "2"}
    )
    assert run.rc[1] == -signal.SIGSEGV, run
    assert "Fatal Python error: Segmentation fault" in run.out[1], run


def test_ecc_targets_node(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path,
        "--iters",
        "5",
        nodes=("nodeA", "nodeB"),
        env={"RESURGO_FAULT": "ecc", "RESURGO_FAULT_NODE": "nodeA", "RESURGO_FAULT_AT": "2"},
    )
    assert run.rc[0] == 1, run
    assert "RuntimeError: CUDA error: uncorrectable ECC error encountered" in run.out[0], run
    assert "CUDA kernel errors might be asynchronously reported" in run.out[0], run
    assert "node=nodeA" in run.out[0] and "ECC" not in run.out[1], run


def test_nan_loss(tmp_path: Path) -> None:
    run = run_pair(tmp_path, "--iters", "5", env={"RESURGO_FAULT": "nan", "RESURGO_FAULT_AT": "3"})
    assert run.rc == [1, 1], run
    losses = [m.group(3) for m in PROGRESS_RE.finditer(run.out[0])]
    assert losses[-1] == "nan" and len(losses) == 3, run
    assert all("RuntimeError: Loss is NaN at iteration 3" in out for out in run.out), run


def test_checkpoint_save_fails(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path, "--iters", "6", "--ckpt-every", "2", "--fault", "ckpt_fail", "--fault-at", "3"
    )
    assert run.rc[0] == 1, run
    assert "checkpoint saved iteration=2 " in run.out[0], run
    assert "OSError: [Errno 28] No space left on device" in run.out[0], run
    assert "checkpoint saved iteration=4" not in run.out[0], run


# ----------------------------------------------------------------------------- hang / slow
def test_hang_peer_gets_gloo_timeout(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path,
        "--iters",
        "50",
        "--collective-timeout",
        "5",
        env={"RESURGO_FAULT": "hang", "RESURGO_FAULT_RANK": "1", "RESURGO_FAULT_AT": "2"},
        hung_rank=1,
        timeout=45,
    )
    assert run.rc[0] == 1, run
    assert "Timed out waiting 5000ms" in run.out[0], run
    assert run.elapsed < 30, run
    assert run.out[1].strip().splitlines()[-1] == "[resurgo-demo] starting fresh", run


def test_slow_rank_still_completes(tmp_path: Path) -> None:
    run = run_pair(
        tmp_path,
        "--iters",
        "4",
        "--per-rank-timing",
        env={
            "RESURGO_FAULT": "slow",
            "RESURGO_FAULT_RANK": "1",
            "RESURGO_FAULT_AT": "2",
            "RESURGO_FAULT_SLOWDOWN": "0.3",
        },
    )
    assert run.rc == [0, 0], run
    step = re.compile(r"^\[rank(\d)\] step=(\d+) step_time_ms=([\d.]+) node=\S+$", re.M)
    times = {(int(m[1]), int(m[2])): float(m[3]) for m in step.finditer("".join(run.out))}
    # The slowdown is a 0.3 s sleep, so 300 ms is a floor the straggler cannot miss; the other
    # rank is compared with it rather than with a fixed time, which a loaded machine can exceed.
    assert times[(1, 3)] >= 300, run
    assert times[(1, 3)] > times[(0, 3)], run  # the straggler stands out per rank
    assert "[resurgo-demo] training complete iteration=4" in run.out[0], run


# ----------------------------------------------------------------------------- in-process
def test_fault_plan_targets_and_once(trainer: ModuleType) -> None:
    ns = trainer.parse_args([])
    d0 = trainer.resolve_dist({"RANK": "0", "WORLD_SIZE": "2", "SLURMD_NODENAME": "node1"})
    d1 = trainer.resolve_dist({"RANK": "1", "WORLD_SIZE": "2", "SLURM_RESTART_COUNT": "1"})
    plan = trainer.build_fault_plan(ns, {"RESURGO_FAULT": "exception", "RESURGO_FAULT_RANK": "all"})
    assert plan.targets(d0) and plan.targets(d1)
    assert plan.armed(d0) and not plan.armed(d1)  # once: first attempt only
    plan = trainer.build_fault_plan(
        ns, {"RESURGO_FAULT": "ecc", "RESURGO_FAULT_ONCE": "0", "RESURGO_FAULT_NODE": "node1"}
    )
    assert plan.armed(d1) and plan.targets(d0) and not plan.targets(d1)
    assert trainer.build_fault_plan(ns, {"RESURGO_FAULT": "hang"}).targets(d1)  # default: last


def test_resolve_dist_slurm(trainer: ModuleType) -> None:
    d = trainer.resolve_dist(
        {
            "SLURM_PROCID": "3",
            "SLURM_STEP_ID": "0",
            "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "0",
            "SLURMD_NODENAME": "node4",
            "SLURM_JOB_ID": "20017",
            "SLURM_RESTART_COUNT": "2",
        }
    )
    assert (d.rank, d.world, d.node, d.job_id, d.restart) == (3, 4, "node4", "20017", 2)
    assert (d.master_addr, d.master_port) == ("127.0.0.1", 20017)


@pytest.mark.parametrize(
    ("kind", "lines", "error"),
    [
        (
            "gpu_xid",
            [
                r"^NVRM: Xid \(PCI:0000:3b:00\): 79, pid=\d+, name=python, GPU has fallen "
                r"off the bus\.$"
            ],
            "CUDA error: unspecified launch failure",
        ),
        (
            "nccl",
            [
                r"^node7:\d+:\d+ \[0\] NCCL WARN NET/IB : Got completion from peer \S+ with "
                r"error 12, opcode 0, len 0, vendor err 129 \(Recv\)$"
            ],
            "unhandled system error",
        ),
        (
            "ib",
            [r"^node7:\d+:\d+ \[0\] NCCL WARN NET/IB: .*IBV_WC_RETRY_EXC_ERR\(12\)"],
            "ncclRemoteError",
        ),
    ],
)
def test_hardware_fault_text(
    trainer: ModuleType,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kind: str,
    lines: list[str],
    error: str,
) -> None:
    d = trainer.resolve_dist({"RANK": "0", "WORLD_SIZE": "2", "SLURMD_NODENAME": "node7"})
    plan = trainer.FaultPlan(kind=kind, kernel_log=str(tmp_path / "kmsg"))
    with pytest.raises(RuntimeError, match=error):
        trainer.fire_fault(plan, d, 5)
    err = capsys.readouterr().err
    for pattern in lines:
        assert re.search(pattern, err, re.M), err
    if kind == "gpu_xid":
        assert "Xid (PCI:0000:3b:00): 79" in (tmp_path / "kmsg").read_text()


def test_progress_line_shape(trainer: ModuleType) -> None:
    line = trainer._progress_line(12, 200, 85.31, 0.1234)
    assert line == (
        " iteration       12/     200 | elapsed time per iteration (ms): 85.3 |"
        " lm loss: 1.234000E-01 |"
    )
    assert trainer._progress_line(3, 5, 1.0, float("nan")).endswith("| lm loss: nan |")


def test_submit_builds_directive_and_env(submit: ModuleType) -> None:
    args, extra = submit.parse_args(
        [
            "--nodes",
            "2",
            "--fault",
            "ecc",
            "--fault-node",
            "node2",
            "--mode",
            "action",
            "--out",
            "/tmp/x.log",
            "--iters",
            "50",
            "--",
            "--per-rank-timing",
        ]
    )
    cmd = submit.build_command(args, extra)
    assert '--comment={"resurgo":{"mode":"action"}}' in cmd
    assert "--output=/tmp/x.log" in cmd and "--nodes=2" in cmd
    assert cmd[-3:] == ["--iters", "50", "--per-rank-timing"]
    env = submit.build_env(args, {"RESURGO_FAULT_RANK": "stale", "PATH": "/bin"})
    assert env["RESURGO_FAULT"] == "ecc" and env["RESURGO_FAULT_NODE"] == "node2"
    assert "RESURGO_FAULT_RANK" not in env and env["RESURGO_FAULT_ONCE"] == "1"


def test_sbatch_script_has_no_comment_directive() -> None:
    text = (DEMO / "train.sbatch").read_text()
    assert "#SBATCH --comment" not in text
    for want in ("--nodes=2", "--ntasks-per-node=1", "--requeue", "--open-mode=append"):
        assert f"#SBATCH {want}" in text
    assert "srun -l --kill-on-bad-exit=1" in text
    subprocess.run(["bash", "-n", str(DEMO / "train.sbatch")], check=True)
