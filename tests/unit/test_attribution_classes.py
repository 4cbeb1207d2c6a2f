"""Classes of failure the independent corpora showed: each rule with a real message format."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry

NODES = ["gpu01", "gpu02"]


def _lines(text: str, source: str = "job.log") -> list[LogLine]:
    return [LogLine(source=source, line_no=i + 1, text=t) for i, t in enumerate(text.splitlines())]


def _run(job: str, nodes: list[str] | None = None) -> Attribution:
    return attribute(Registry.default(), None, _lines(job), None, [], nodes or NODES)


# Megatron's dataset builder (megatron/core/datasets/indexed_dataset.py) opens the .idx file
# on rank 0 first; CPython's FileNotFoundError message.
MISSING_IDX = (
    "0: [rank0]: FileNotFoundError: [Errno 2] No such file or directory: "
    "'/lustre/data/pile/pile_text_documnet.idx'\n"
    "srun: error: gpu01: task 0: Exited with exit code 1\n"
)


def test_a_file_only_rank_0_reads_missing_is_the_jobs_configuration() -> None:
    a = _run(MISSING_IDX)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_file_missing_for_every_rank_of_one_node_is_not_stopped() -> None:
    # A mount missing on one node fails every rank there: retry (elsewhere), do not stop.
    job = "".join(
        f"1: [rank{r}]: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'/lustre/data/shard-{r}.tar'\n"
        for r in (8, 9, 10, 11)
    )
    a = _run(job + "srun: error: gpu02: task 1: Exited with exit code 1\n")
    assert default_advice(a).kind != AdviceKind.STOP
