"""Where a running job's step time goes, read from the phases its timer prints: one rank's
extra work (logging, uploads, profiler traces) or every rank waiting for its input. Either is
the job's own straggler (attribution-labels.md: application-level stragglers), no node's."""

from __future__ import annotations

import re
import statistics

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.debug_modes import profiling_every_step
from resurgo.attribute.series import actor_fields
from resurgo.contracts import AnomalyKind, Category

# Step phases that are the job's own extra work rather than training: rank 0 logging,
# uploading metrics, writing samples, dumping profiler traces for the whole job while the other
# ranks wait in the next collective (NVRx usage guide: rank 0's extra work; torchtitan
# docs/debugging.md: a trace per `profile_freq` steps). A phase taking EXTRA_WORK_SHARE of
# the step, step after step, is the code's straggler.
EXTRA_WORK_KEY = re.compile(
    r"(?i)(?:^|[_+/ -])(?:log(?:ging)?|upload|wandb|samples?|profil\w*|traces?|dump|print"
    r"|tensorboard|tb)(?:$|[_+/ -])"
)
# Input-pipeline phases: waiting for the next batch (pytorch/examples AverageMeter `Data`,
# `data_time`, `dataloader_ms`). Every rank waiting most of its step for data is the job's own
# input pipeline (workers, CPUs requested, preprocessing), not a node: no single rank is slow.
_DATA_KEY = re.compile(r"(?i)^(?:data|data_?(?:time|wait|load\w*)|dataloader\w*|batch_?load\w*)$")
_STEP_KEYS = ("step", "time", "step_time", "step_time_s", "step_time_ms", "iter_time",
              "iteration_time", "batch_time", "it_time", "dt", "t_step", "time_ms")  # fmt: skip
EXTRA_WORK_SHARE = 0.25
DATA_SHARE = 0.5
MIN_PHASE_SAMPLES = 3
PHASE_WINDOW = 10  # the recent samples a phase's share is read over


def own_work(a: Analysis) -> Verdict | None:
    """No rank or node singled out, but the step's own phases say where its time goes: rank
    0's extra work (logging, uploads, profiler traces) or every rank waiting for its input."""
    extra: list[tuple[object, str, float]] = []
    data: list[tuple[object, str, float]] = []
    actors: set[object] = set()
    by_actor: dict[object, dict[str, list[float]]] = {}
    for key, per_actor in actor_fields(a).items():
        for actor, samples in per_actor.items():
            by_actor.setdefault(actor, {})[key.removeprefix("field:")] = [
                s.value for s in samples[-PHASE_WINDOW:]
            ]
    for actor, fields in by_actor.items():
        step_key = next(
            (k for k in _STEP_KEYS if len(fields.get(k, ())) >= MIN_PHASE_SAMPLES), None
        )
        timed = [v for v in fields.values() if len(v) >= MIN_PHASE_SAMPLES]
        if step_key is None and len(timed) < 2:
            continue
        actors.add(actor)
        # Without a total, the phases a line lists make up its step (`data_wait 5.26s |
        # fwd+bwd 0.24s`).
        step = (
            statistics.median(fields[step_key]) if step_key else sum(map(statistics.median, timed))
        )
        if step <= 0:
            continue
        for key, values in fields.items():
            if key == step_key or len(values) < MIN_PHASE_SAMPLES:
                continue
            share = statistics.median(values) / step
            if EXTRA_WORK_KEY.search(key) and share >= EXTRA_WORK_SHARE and share < 1:
                extra.append((actor, key, share))
            elif _DATA_KEY.match(key) and DATA_SHARE <= share < 1:
                data.append((actor, key, share))
    why = ""
    ranks: list[int] = []
    doing = {x for x, _, _ in extra}
    # A minority of the ranks (rank 0 for the whole job), or rank 0 alone printing its phases.
    if extra and (len(doing) * 2 < len(actors) or doing <= {0, None}):
        actor, key, share = max(extra, key=lambda x: x[2])
        why = f"{key} takes {share:.0%} of each step on one rank while the others wait"
        ranks = [actor] if isinstance(actor, int) else []
    elif data and {x for x, _, _ in data} == actors:
        _, key, share = max(data, key=lambda x: x[2])
        why = f"every rank waits for its input ({key} {share:.0%} of each step)"
    if not why:
        return profiling_every_step(a)
    key = extra[0][1] if ranks or extra else data[0][1]
    evidence = [e for e in a.lines if key in e.text.lower()][-2:]
    return Verdict(
        Category.APPLICATION, "straggler|application", f"straggler in the application ({why})",
        0.6, ranks=ranks, evidence=evidence, kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip
