"""Rank 0 still writing a full checkpoint when the others' collective times out.

Lines as torchtune and ProcessGroupNCCL print them (meta-pytorch/torchtune#2093, torchtune
PR #2651's log): `Saving checkpoint. This may take some time. Retrieving full model state
dict...`, then `[Rank N] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9387,
OpType=ALLREDUCE, NumelIn=1, ...)` from every other rank.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(job: str, node_logs: dict[str, list[LogLine]] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], ["v100-g12"], node_logs=node_logs or {},
        scheduler_lines=[],
    )  # fmt: skip


SAVE = (
    "INFO:torchtune.utils._logging:Saving checkpoint. This may take some time. Retrieving full "
    "model state dict...\n"
    "INFO:torchtune.utils._logging:Model checkpoint of size 4.98 GB saved to /scratch/abn/ft/"
    "epoch_0/ft-model-00001-of-00030.safetensors\n"
)


def _timeouts(ranks: range) -> str:
    return (
        "".join(
            f"[rank{r}]:[E1129 11:56:57.219163939 ProcessGroupNCCL.cpp:616] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=28956, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600039 "
            "milliseconds before timing out.\n"
            for r in ranks
        )
        + "srun: error: v100-g12: task 0: Exited with exit code 1\n"
    )


def test_the_others_timing_out_while_rank_0_writes_its_checkpoint_is_the_jobs_save() -> None:
    a = _run(SAVE + _timeouts(range(1, 8)))
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_every_rank_timing_out_is_not_one_ranks_save() -> None:
    a = _run(SAVE + _timeouts(range(0, 8)))
    assert "checkpoint" not in a.summary


def test_a_save_slowed_by_a_lost_file_system_is_not_the_jobs() -> None:
    nfs = _lines(
        "[Sun Nov 29 11:50:02 2026] nfs: server scratch01 not responding, still trying\n",
        "dmesg_v100-g12.txt",
    )
    a = _run(SAVE + _timeouts(range(1, 8)), {"v100-g12": nfs})
    assert a.category != Category.APPLICATION
