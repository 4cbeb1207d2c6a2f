"""The health-check contract and the pure decisions of validated return to service.

Contract of the check (PolicyConfig.health_check, an argv):
- it runs as one Slurm job on the drained node alone (`sbatch -w <node> -N1 --reservation
  resurgo_check_<node> --no-requeue --time <timeout>`; the command line is `--wrap`ped), as the
  controller's user, with the controller's environment;
- it **passes only** when the job ends COMPLETED with exit code 0; any other end (non-zero
  exit, a signal, TIMEOUT after `health_check_timeout_seconds`, NODE_FAIL, CANCELLED) fails;
- its output (stdout and stderr, one file in `health_check_output_dir`) may carry report lines
  `RESURGO-CHECK <text>`: they are recorded with the result and the first one of a failed check
  becomes the drain reason (`resurgo node-health ...: validation failed: <text>`); a line
  `RESURGO-CHECK FAIL ...` fails the check even with exit code 0. The last lines of the output
  are recorded too.
"""

from __future__ import annotations

import hashlib
import re

from resurgo.nodes.models import HealthCheckResult

__all__ = [
    "REPORT_PREFIX",
    "adopt_reason",
    "check_job_name",
    "check_verdict",
    "drain_reason",
    "failed_reason",
    "ours",
    "repaired_in_slurm",
    "reservation_name",
]

REPORT_PREFIX = "RESURGO-CHECK "
MAX_REPORT_LINES = 10
MAX_TAIL_LINES = 20
MAX_LINE = 300
MAX_REASON = 250
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def reservation_name(node: str) -> str:
    """The maintenance reservation that admits only the check onto the node."""
    return "resurgo_check_" + _UNSAFE.sub("_", node)


def check_job_name(key: str, round_: int) -> str:
    """The check job's name: one per validation round of one node workflow."""
    digest = hashlib.sha256(f"{key}#{round_}".encode()).hexdigest()[:16]
    return f"resurgo-check-{digest}"


def ours(reason: str, key: str) -> bool:
    """The node's Slurm Reason is one Resurgo's node workflow `key` wrote."""
    return reason.startswith("resurgo") and key in reason


def repaired_in_slurm(state: str, reason: str, key: str) -> str | None:
    """Slurm's own sign that the node was repaired while drained: an operator replaced our
    Reason (e.g. `scontrol update NodeName=n Reason="repaired: new GPU"`) and left it drained.
    Returns what was seen, or None."""
    if "DRAIN" in state and reason and not ours(reason, key):
        return f"Reason changed in Slurm to {reason[:200]!r}"
    return None


def _clean(line: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in line)[:MAX_LINE]


def check_verdict(
    *, job_id: int, state: str, exit_code: int, exit_signal: int, output: str, path: str = ""
) -> HealthCheckResult:
    """The result of one finished check job (see the contract above)."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    report = [_clean(ln[len(REPORT_PREFIX) :]) for ln in lines if ln.startswith(REPORT_PREFIX)]
    said_fail = any(r.upper().startswith("FAIL") for r in report)
    passed = state == "COMPLETED" and exit_code == 0 and exit_signal == 0 and not said_fail
    ended = f"{state} exit {exit_code}:{exit_signal}"
    if passed:
        summary = f"check job {job_id} passed ({ended})"
    else:
        why = next((r for r in report if r.upper().startswith("FAIL")), None) or (
            report[0] if report else ended
        )
        summary = f"check job {job_id} failed ({ended}): {why}"
    return HealthCheckResult(
        job_id=job_id, passed=passed, state=state, exit_code=exit_code, exit_signal=exit_signal,
        report=report[:MAX_REPORT_LINES], tail=[_clean(ln) for ln in lines[-MAX_TAIL_LINES:]],
        summary=summary[:1000], output_path=path,
    )  # fmt: skip


def failed_reason(key: str, summary: str) -> str:
    """The Reason a node keeps after a failed validation (names Resurgo, the key, the check)."""
    return f"resurgo node-health {key}: validation failed: {_clean(summary)}"[:MAX_REASON]


def drain_reason(key: str, advice_reason: str) -> str:
    """The Reason of a lemon drain: Resurgo, the workflow's key, then the advice."""
    return f"resurgo {key} {advice_reason.removeprefix('resurgo ')}"[:MAX_REASON]


def adopt_reason(key: str, reason: str) -> str:
    """The Reason of a drain a job's recovery made, once its validation is Resurgo's to run."""
    return f"resurgo {key} awaiting validation; was: {_clean(reason)}"[:MAX_REASON]
