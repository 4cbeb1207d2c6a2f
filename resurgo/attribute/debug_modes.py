"""A running job slowed by a debugging or profiling mode its own code switched on.

Some debugging aids slow every step by design, and say so when they are switched on. PyTorch's
autograd anomaly detection (`torch.autograd.set_detect_anomaly(True)` or `detect_anomaly()`,
torch/autograd/anomaly_mode.py) warns `UserWarning: Anomaly Detection has been enabled. This
mode will increase the runtime and should only be enabled for debugging.` at every rank's
start; it records a traceback for every operation of the forward pass and checks every
backward result. A job still stepping with it on runs slower than it should because of its own
configuration: an application straggler, with nothing to retry (attribution-labels.md:
application-level stragglers; a running application straggler's action is none). PyTorch's own
tracing turns it on with the warning silenced, so the warning in a job's output is the job's.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import strip_prefixes

MIN_TRACES = 3  # (fewer traces are a measurement, however close together)

# A profiler trace written out (torchtitan `Dumping profiler traces at step 200`, PyTorch's
# `export_chrome_trace`): one every few hundred steps is a measurement; one at (nearly) every
# logged step is a job slowed down by its own profiling (torchtitan `profiling.profile_freq`).
_TRACE_DUMP = re.compile(
    r"(?i)\bdumping profiler traces? at step|(?<!finished )\b(?:export|dump|sav|writ)\w* (?:the )?"
    r"(?:profiler|chrome|kineto) traces?\b"
)
_SLOW_MODE = re.compile(
    r"\bAnomaly Detection has been enabled\. This mode will increase the runtime\b"
)


def slow_debug_mode(a: Analysis) -> Verdict | None:
    """A still-progressing job whose output shows a step-slowing debug mode switched on."""
    from resurgo.attribute.liveness import still_progressing  # (liveness reads stragglers)

    if not a.running:
        return None
    said = [e for e in a.lines if "Anomaly Detection" in e.text and _SLOW_MODE.search(e.text)]
    if not said or not still_progressing(a):
        return None
    return Verdict(
        Category.APPLICATION, "straggler|application|debug_mode",
        "straggler in the application: the job runs with autograd anomaly detection on, "
        "which slows every step (PyTorch warns it should only be enabled for debugging)", 0.6,
        evidence=said[:2], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def profiling_every_step(a: Analysis) -> Verdict | None:
    """Profiler traces written at half or more of the logged steps, three times at least."""
    dumps = [e for e in a.lines if "trace" in e.text and _TRACE_DUMP.search(e.text)]
    advances = a.scan.advances
    if len(dumps) < MIN_TRACES or not advances:
        return None
    # The logged steps from the one the first trace belongs to (printed before it).
    first = dumps[0].line_no
    before = [o for o in advances if a.lines[o].line_no < first]
    start = before[-1] if before else advances[0]
    logged = sum(1 for o in advances if o >= start)
    if len(dumps) * 2 < logged:
        return None
    said = {strip_prefixes(e.text).rank for e in dumps}
    ranks = [r for r in said if r is not None] if len(said) == 1 else []
    return Verdict(
        Category.APPLICATION, "straggler|application",
        f"straggler in the application (a profiler trace is written at {len(dumps)} of "
        f"{logged} logged steps)", 0.6,
        ranks=ranks, evidence=dumps[-2:], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip
