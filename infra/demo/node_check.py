"""A node health check for Resurgo's validated return to service (CPU, gloo): two local ranks
all-reduce a tensor and take one training step of a small MLP, on the node the check runs on.

Contract (see resurgo/nodes/health_check.py): exit 0 passes; `RESURGO-CHECK <text>` lines are the
report, `RESURGO-CHECK FAIL <why>` fails. On a GPU site use `dcgmi diag -r 2`, `nvidia-smi -q`
checks or single-node nccl-tests in the same shape.

    python infra/demo/node_check.py [--ranks 2] [--size 1024] [--fail-if-exists PATH]

`--fail-if-exists`: fail when PATH exists (tests and demos simulate a node still broken).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, port: int, size: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        value = torch.full((size,), float(rank + 1))
        dist.all_reduce(value)
        expected = world * (world + 1) / 2
        if not torch.allclose(value, torch.full((size,), expected)):
            raise SystemExit(f"all-reduce gave {value[0].item()}, expected {expected}")
        torch.manual_seed(rank)
        layers = [torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)]
        model = torch.nn.Sequential(*layers)
        loss = model(torch.randn(32, 64)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
        if not torch.isfinite(loss):
            raise SystemExit("training step produced a non-finite loss")
    finally:
        dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--fail-if-exists", default=None)
    args = p.parse_args()
    host = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    if args.fail_if_exists and os.path.exists(args.fail_if_exists):
        print(f"RESURGO-CHECK FAIL {host}: simulated fault ({args.fail_if_exists} exists)")
        return 1
    import torch.multiprocessing as mp

    started = time.monotonic()
    try:
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
            _rank, args=(args.ranks, _free_port(), args.size), nprocs=args.ranks,
            start_method="spawn",
        )  # fmt: skip
    except Exception as exc:  # a rank failed: report it as the check's verdict
        print(f"RESURGO-CHECK FAIL {host}: gloo smoke failed: {str(exc).splitlines()[0][:200]}")
        return 1
    took = time.monotonic() - started
    print(f"RESURGO-CHECK ok {host}: gloo all-reduce of {args.ranks} ranks and one training step "
          f"in {took:.1f}s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
