"""Resurgo demo trainer: real torch.distributed DDP (gloo, CPU) with injectable faults.

Launch under Slurm (``srun python trainer.py``: rank/world from SLURM_PROCID/SLURM_NTASKS) or
locally torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

Output lines (all flushed immediately):

    [resurgo-demo] rank=<r> world=<w> node=<node> pid=<pid> job=<job|none> restart=<n>
    [resurgo-demo] starting fresh                                   (every rank)
    [resurgo-demo] resumed from checkpoint iteration=<N>            (every rank)
     iteration       12/     200 | elapsed time per iteration (ms): 85.3 | lm loss: 1.234567E-01 |
    [resurgo-demo] checkpoint saved iteration=<N> path=<p>          (rank 0)
    [rank<r>] step=<i> step_time_ms=<t> node=<node>                 (--per-rank-timing)
    [resurgo-demo] training complete iteration=<N>                  (rank 0)

``step_time_ms`` is the rank's own work for the step (data, forward, backward compute) up to the
moment its gradients are ready for the all-reduce, so it excludes time spent waiting for slower
peers: a straggler stands out even though DDP keeps all ranks in lock-step.

Faults (flags or env; env names in brackets): --fault [RESURGO_FAULT], --fault-node
[RESURGO_FAULT_NODE, comma list], --fault-rank [RESURGO_FAULT_RANK, comma list or ``all``],
--fault-at [RESURGO_FAULT_AT], --fault-once [RESURGO_FAULT_ONCE, default 1: inject only when
SLURM_RESTART_COUNT is 0/unset], --fault-slowdown [RESURGO_FAULT_SLOWDOWN]. Without a node or rank
target the fault hits the last rank. See FAULTS for the list.
"""

import argparse
import ctypes
import errno
import faulthandler
import hashlib
import os
import re
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch._C._distributed_c10d import GradBucket  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

PREFIX = "[resurgo-demo]"
FAULTS = (
    "none",
    "exception",
    "sigkill",
    "segfault",
    "hang",
    "hang_silent",
    "slow",
    "gpu_xid",
    "nccl",
    "ecc",
    "ib",
    "ckpt_fail",
    "nan",
)
CKPT_RE = re.compile(r"^iter_(\d{7,})\.pt$")
CUDA_TRAILER = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
NCCL_VERSION = "2.21.5"
CUDA_ERRORS = {
    "ecc": "uncorrectable ECC error encountered",
    "gpu_xid": "unspecified launch failure",
}


def say(msg: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(msg + "\n")
    stream.flush()


# ----------------------------------------------------------------------------- environment
@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    node: str
    job_id: str | None
    restart: int
    master_addr: str
    master_port: int


def _env_int(env: dict[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return int(value)
    return default


def resolve_dist(env: dict[str, str] | None = None) -> Dist:
    """Rank/world from srun (SLURM_PROCID...) unless torchrun-style env is explicit."""
    env = dict(os.environ if env is None else env)
    under_srun = "SLURM_PROCID" in env and "SLURM_STEP_ID" in env
    torchrun = "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and not under_srun)
    if under_srun and not torchrun:
        rank = _env_int(env, "SLURM_PROCID", default=0)
        world = _env_int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", default=1)
        local_rank = _env_int(env, "SLURM_LOCALID", default=0)
    else:
        rank = _env_int(env, "RANK", default=0)
        world = _env_int(env, "WORLD_SIZE", default=1)
        local_rank = _env_int(env, "LOCAL_RANK", default=0)
    job_id = env.get("SLURM_JOB_ID") or None
    if env.get("MASTER_PORT"):
        port = int(env["MASTER_PORT"])
    elif job_id and job_id.isdigit():
        port = 20000 + int(job_id) % 20000
    else:
        port = 29500
    return Dist(
        rank=rank,
        world=world,
        local_rank=local_rank,
        node=env.get("SLURMD_NODENAME") or socket.gethostname(),
        job_id=job_id,
        restart=_env_int(env, "SLURM_RESTART_COUNT", default=0),
        master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=port,
    )


# ----------------------------------------------------------------------------- faults
@dataclass
class FaultPlan:
    kind: str = "none"
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    all_ranks: bool = False
    at: int = 10
    once: bool = True
    slowdown: float = 0.5
    kernel_log: str | None = None
    fired: set[str] = field(default_factory=set)

    def armed(self, d: Dist) -> bool:
        """Whether this attempt injects at all (``once``: only on the first attempt)."""
        return self.kind != "none" and not (self.once and d.restart > 0)

    def targets(self, d: Dist) -> bool:
        if self.all_ranks:
            return True
        if self.nodes or self.ranks:
            return d.node in self.nodes or d.rank in self.ranks
        return d.rank == d.world - 1


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("0", "false", "no", "off", "")


def build_fault_plan(args: argparse.Namespace, env: dict[str, str]) -> FaultPlan:
    kind = (args.fault or env.get("RESURGO_FAULT") or "none").strip().lower()
    if kind not in FAULTS:
        raise SystemExit(f"{PREFIX} unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
    node_spec = args.fault_node if args.fault_node is not None else env.get("RESURGO_FAULT_NODE")
    rank_spec = args.fault_rank if args.fault_rank is not None else env.get("RESURGO_FAULT_RANK")
    nodes = tuple(n.strip() for n in (node_spec or "").split(",") if n.strip())
    rank_items = [r.strip() for r in (rank_spec or "").split(",") if r.strip()]
    all_ranks = any(r.lower() == "all" for r in rank_items)
    ranks = tuple(int(r) for r in rank_items if r.lower() != "all")
    at_spec = args.fault_at if args.fault_at is not None else env.get("RESURGO_FAULT_AT")
    once_spec = args.fault_once if args.fault_once is not None else env.get("RESURGO_FAULT_ONCE")
    slow_spec = (
        args.fault_slowdown
        if args.fault_slowdown is not None
        else env.get("RESURGO_FAULT_SLOWDOWN")
    )
    return FaultPlan(
        kind=kind,
        nodes=nodes,
        ranks=ranks,
        all_ranks=all_ranks,
        at=int(at_spec) if at_spec not in (None, "") else 10,
        once=_truthy(str(once_spec)) if once_spec not in (None, "") else True,
        slowdown=float(slow_spec) if slow_spec not in (None, "") else 0.5,
        kernel_log=args.kernel_log or env.get("RESURGO_KERNEL_LOG") or None,
    )


def _kernel_line(plan: FaultPlan, line: str) -> None:
    """Print a kernel-style line; also append it (dmesg -T style) to --kernel-log if set."""
    say(line, err=True)
    if plan.kernel_log:
        stamp = datetime.now(UTC).strftime("%a %b %d %H:%M:%S %Y")
        with open(plan.kernel_log, "a", encoding="utf-8") as fh:
            fh.write(f"[{stamp}] {line}\n")


def _gpu_uuid(node: str) -> str:
    """A stable fake GPU UUID per node (the driver's BDF -> UUID line)."""
    h = hashlib.sha1(node.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _nccl_prefix(d: Dist) -> str:
    return f"{d.node}:{os.getpid()}:{threading.get_native_id()} [{d.local_rank}]"


def fire_fault(plan: FaultPlan, d: Dist, iteration: int) -> None:
    """Inject a crash/hang fault on this rank (called once, at the fault iteration)."""
    kind = plan.kind
    pid = os.getpid()
    if kind == "exception":
        _validate_batch_shape(iteration, expected=IN_FEATURES, got=IN_FEATURES - 1)
    elif kind == "sigkill":
        os.kill(pid, signal.SIGKILL)
    elif kind == "segfault":
        ctypes.string_at(0)
    elif kind == "hang":
        while True:  # no output, no collectives: peers hit the gloo timeout
            time.sleep(3600)
    elif kind == "hang_silent":
        while True:
            time.sleep(3600)
    elif kind == "gpu_xid":
        _kernel_line(plan, f"NVRM: GPU at PCI:0000:3b:00: {_gpu_uuid(d.node)}")
        _kernel_line(
            plan,
            f"NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, GPU has fallen off the bus.",
        )
        _kernel_line(
            plan,
            "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        )
        raise RuntimeError(f"CUDA error: {CUDA_ERRORS[kind]}\n{CUDA_TRAILER}")
    elif kind == "ecc":
        raise RuntimeError(f"CUDA error: {CUDA_ERRORS[kind]}\n{CUDA_TRAILER}")
    elif kind == "nccl":
        peer = f"10.0.0.{(d.rank + 1) % max(d.world, 2) + 1}<{40000 + d.rank}>"
        warn = (
            f"NET/IB : Got completion from peer {peer} with error 12, opcode 0, len 0, "
            "vendor err 129 (Recv)"
        )
        say(f"{_nccl_prefix(d)} NCCL WARN {warn}", err=True)
        say(f"{_nccl_prefix(d)} NCCL INFO transport/net.cc:1298 -> 6", err=True)
        raise dist.DistBackendError(
            "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
            f"details), NCCL version {NCCL_VERSION}\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call "
            "failed or device error. \n"
            f"Last error:\n{warn}"
        )
    elif kind == "ib":
        peer_ip = f"10.0.0.{(d.rank + 1) % max(d.world, 2) + 1}"
        own_ip = f"10.0.0.{d.rank + 1}"
        warn = (
            f"NET/IB: Got completion from peer {peer_ip}<{40000 + d.rank}> with "
            "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RECV_RDMA_WITH_IMM(129) "
            f"vendor_err=129 localGid ::ffff:{own_ip} remoteGids::ffff:{peer_ip} hca mlx5_1"
        )
        say(f"{_nccl_prefix(d)} NCCL WARN {warn}", err=True)
        raise dist.DistBackendError(
            "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, "
            f"NCCL version {NCCL_VERSION}\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely.\n"
            f"Last error:\n{warn}"
        )


def _validate_batch_shape(iteration: int, *, expected: int, got: int) -> NoReturn:
    raise ValueError(
        f"bad batch shape at iteration {iteration}: expected [batch, {expected}] features, "
        f"got [batch, {got}]"
    )


# ----------------------------------------------------------------------------- model / data
IN_FEATURES = 256


def make_model(hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def make_batch(
    seed: int, rank: int, iteration: int, batch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic synthetic regression batch: y = sin(x @ w) + 0.1 * noise."""
    w = torch.Generator().manual_seed(seed)
    w_true = torch.randn(IN_FEATURES, 1, generator=w) / IN_FEATURES**0.5
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + iteration)
    x = torch.randn(batch, IN_FEATURES, generator=g)
    y = torch.sin(3 * x @ w_true) + 0.1 * torch.randn(batch, 1, generator=g)
    return x, y


# ----------------------------------------------------------------------------- checkpoints
def latest_checkpoint(ckpt_dir: Path) -> tuple[int, Path] | None:
    best: tuple[int, Path] | None = None
    if not ckpt_dir.is_dir():
        return None
    for p in ckpt_dir.iterdir():
        m = CKPT_RE.match(p.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    return best


def save_checkpoint(
    ckpt_dir: Path,
    iteration: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    *,
    fail: bool,
    keep: int,
) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"iter_{iteration:07d}.pt"
    tmp = ckpt_dir / f".{path.name}.tmp.{os.getpid()}"
    state = {"iteration": iteration, "model": model.state_dict(), "optimizer": opt.state_dict()}
    with open(tmp, "wb") as fh:
        if fail:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    (ckpt_dir / "latest_checkpointed_iteration.txt.tmp").write_text(f"{iteration}\n")
    os.replace(
        ckpt_dir / "latest_checkpointed_iteration.txt.tmp",
        ckpt_dir / "latest_checkpointed_iteration.txt",
    )
    if keep > 0:
        found = sorted(
            (int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := CKPT_RE.match(p.name))
        )
        for _, old in found[:-keep]:
            old.unlink(missing_ok=True)
    return path


def default_ckpt_dir(env: dict[str, str]) -> Path:
    if env.get("RESURGO_CKPT_DIR"):
        return Path(env["RESURGO_CKPT_DIR"])
    if env.get("SLURM_JOB_ID"):
        base = env.get("SLURM_SUBMIT_DIR") or os.getcwd()
        return Path(base) / f"ckpt-{env['SLURM_JOB_ID']}"
    return Path("ckpt")


# ----------------------------------------------------------------------------- training
class _HookState:
    def __init__(self) -> None:
        self.grads_ready = 0.0


def _timed_allreduce(state: _HookState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    state.grads_ready = time.perf_counter()
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--iters", type=int, default=200, help="total iterations (default 200)")
    p.add_argument(
        "--ckpt-dir",
        default=None,
        help="default $RESURGO_CKPT_DIR, $SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID, ./ckpt",
    )
    p.add_argument("--ckpt-every", type=int, default=20, help="checkpoint interval (iterations)")
    p.add_argument("--ckpt-keep", type=int, default=3, help="checkpoints kept (0 = all)")
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints")
    p.add_argument("--sleep-per-iter", type=float, default=0.0, help="extra seconds per iter")
    p.add_argument(
        "--collective-timeout",
        type=float,
        default=60.0,
        help="gloo collective/rendezvous timeout in seconds (default 60)",
    )
    p.add_argument(
        "--per-rank-timing",
        action="store_true",
        help="every rank prints [rank<r>] step=<i> step_time_ms=<t> node=<node>",
    )
    p.add_argument("--log-interval", type=int, default=1, help="progress line every N iters")
    p.add_argument("--hidden", type=int, default=4096, help="MLP hidden width")
    p.add_argument("--batch", type=int, default=1024, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--fault", choices=FAULTS, default=None, help="[RESURGO_FAULT]")
    p.add_argument("--fault-node", default=None, help="[RESURGO_FAULT_NODE] node name(s)")
    p.add_argument("--fault-rank", default=None, help="[RESURGO_FAULT_RANK] rank(s) or 'all'")
    p.add_argument("--fault-at", type=int, default=None, help="[RESURGO_FAULT_AT] (default 10)")
    p.add_argument(
        "--fault-once",
        default=None,
        help="[RESURGO_FAULT_ONCE] 1 (default): only when SLURM_RESTART_COUNT=0",
    )
    p.add_argument(
        "--fault-slowdown",
        type=float,
        default=None,
        help="[RESURGO_FAULT_SLOWDOWN] extra s/iter for 'slow' (default 0.5)",
    )
    p.add_argument(
        "--kernel-log",
        default=None,
        help="[RESURGO_KERNEL_LOG] also append kernel-style (NVRM) lines here",
    )
    return p.parse_args(argv)


def _progress_line(iteration: int, total: int, ms: float, loss: float) -> str:
    loss_s = f"{loss:.6E}" if loss == loss and abs(loss) != float("inf") else str(loss).lower()
    return (
        f" iteration {iteration:8d}/{total:8d} | elapsed time per iteration (ms): {ms:.1f} |"
        f" lm loss: {loss_s} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    faulthandler.enable()
    args = parse_args(argv)
    env = dict(os.environ)
    d = resolve_dist(env)
    plan = build_fault_plan(args, env)
    torch.set_num_threads(max(1, args.threads))
    say(
        f"{PREFIX} rank={d.rank} world={d.world} node={d.node} pid={os.getpid()} "
        f"job={d.job_id or 'none'} restart={d.restart}"
    )

    os.environ["MASTER_ADDR"] = d.master_addr
    os.environ["MASTER_PORT"] = str(d.master_port)
    if d.master_addr.startswith("127.") or d.master_addr == "localhost":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://{d.master_addr}:{d.master_port}",
        rank=d.rank,
        world_size=d.world,
        timeout=timedelta(seconds=args.collective_timeout),
    )

    model = make_model(args.hidden, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ckpt_dir = Path(args.ckpt_dir) if args.ckpt_dir else default_ckpt_dir(env)

    # Rank 0 picks the checkpoint so every rank resumes from the same one.
    found = None if args.no_resume else latest_checkpoint(ckpt_dir)
    pick = torch.tensor([found[0] if (found and d.rank == 0) else 0], dtype=torch.long)
    dist.broadcast(pick, src=0)
    start_iter = int(pick.item())
    if start_iter > 0:
        state = torch.load(ckpt_dir / f"iter_{start_iter:07d}.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        say(f"{PREFIX} resumed from checkpoint iteration={start_iter}")
    else:
        say(f"{PREFIX} starting fresh")

    hook = _HookState()
    ddp = DDP(model)
    ddp.register_comm_hook(hook, _timed_allreduce)
    loss_fn = nn.MSELoss()

    armed = plan.armed(d)
    fault_iter = max(plan.at, start_iter + 1)
    targeted = plan.targets(d)
    last_saved = start_iter
    window_start = time.perf_counter()
    iteration = start_iter
    for iteration in range(start_iter + 1, args.iters + 1):
        t0 = time.perf_counter()
        fault_now = armed and iteration == fault_iter
        if fault_now and plan.kind == "hang_silent":
            fire_fault(plan, d, iteration)  # every rank goes quiet
        if fault_now and targeted and plan.kind not in ("slow", "nan", "ckpt_fail"):
            fire_fault(plan, d, iteration)
        if armed and targeted and plan.kind == "slow" and iteration >= fault_iter:
            time.sleep(plan.slowdown)
        x, y = make_batch(args.seed, d.rank, iteration, args.batch)
        if fault_now and targeted and plan.kind == "nan":
            x[0, 0] = float("nan")  # one corrupt sample poisons the all-reduced gradients
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        hook.grads_ready = 0.0
        loss.backward()
        step_ms = ((hook.grads_ready or time.perf_counter()) - t0) * 1000.0
        opt.step()
        report = loss.detach().clone()
        dist.all_reduce(report)
        mean_loss = float(report.item()) / d.world
        if args.sleep_per_iter > 0:
            time.sleep(args.sleep_per_iter)
        if args.per_rank_timing:
            say(f"[rank{d.rank}] step={iteration} step_time_ms={step_ms:.1f} node={d.node}")
        nan = mean_loss != mean_loss
        if d.rank == 0 and (iteration % args.log_interval == 0 or nan):
            now = time.perf_counter()
            n = args.log_interval if not nan else 1
            say(_progress_line(iteration, args.iters, (now - window_start) * 1000.0 / n, mean_loss))
            window_start = now
        if nan:
            message = f"Loss is NaN at iteration {iteration}"
            raise RuntimeError(message)
        if args.ckpt_every > 0 and iteration % args.ckpt_every == 0:
            _checkpoint(ckpt_dir, iteration, model, opt, plan, d, armed, args.ckpt_keep)
            last_saved = iteration

    if iteration > last_saved:
        _checkpoint(ckpt_dir, iteration, model, opt, plan, d, armed, args.ckpt_keep)
    dist.barrier()
    if d.rank == 0:
        say(f"{PREFIX} training complete iteration={iteration}")
    dist.destroy_process_group()
    return 0


def _checkpoint(
    ckpt_dir: Path,
    iteration: int,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    plan: FaultPlan,
    d: Dist,
    armed: bool,
    keep: int,
) -> None:
    if d.rank == 0:
        fail = armed and plan.kind == "ckpt_fail" and iteration >= plan.at
        path = save_checkpoint(ckpt_dir, iteration, model, opt, fail=fail, keep=keep)
        say(f"{PREFIX} checkpoint saved iteration={iteration} path={path}")


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit:
        raise
    except BaseException:
        # Print the traceback (torch's excepthook adds the "[rank<r>]: " prefix), then exit 1
        # without interpreter teardown, which can abort inside gloo when peers are gone.
        sys.excepthook(*sys.exc_info())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(code)
