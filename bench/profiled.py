"""Run a module under cProfile, one profile per measured window (bench/scale.py --profile).

    python -m bench.profiled <out prefix> <module> [args...]

The process runs as `python -m <module> args...` would, profiled from the start. SIGUSR1 ends
the current window: its stats are written to `<out prefix>.<n>.prof` (n = 0, 1, ...) and a new
window starts, so a bench sends SIGUSR1 at the start of a steady window (discarding start-up)
and again at its end. Only the main thread is profiled: the asyncio loop, where the
controller's and worker's own Python work runs.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    prefix, module = sys.argv[1], sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    state = {"profile": cProfile.Profile(), "n": 0}

    def window(_sig: int, _frame: FrameType | None) -> None:
        profile: cProfile.Profile = state["profile"]  # type: ignore[assignment]
        profile.disable()
        profile.dump_stats(f"{prefix}.{state['n']}.prof")
        state["n"] = int(state["n"]) + 1  # type: ignore[call-overload]
        state["profile"] = fresh = cProfile.Profile()
        fresh.enable()

    signal.signal(signal.SIGUSR1, window)
    state["profile"].enable()  # type: ignore[attr-defined]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
