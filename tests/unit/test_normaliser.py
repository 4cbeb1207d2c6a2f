"""One line normaliser for every source: prefix stacks, Slurm hostlists, shipper JSON."""

from __future__ import annotations

from resurgo.attribute.rules import attribute
from resurgo.contracts import LogLine
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.registry import Registry


def _lines(*texts: str) -> list[LogLine]:
    return [LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(texts)]


def test_host_then_rank_prefix_shows_the_traceback() -> None:
    pre = strip_prefixes("[node003] [rank0]: Traceback (most recent call last):")
    assert (pre.host, pre.rank, pre.body) == ("node003", 0, "Traceback (most recent call last):")


def test_prefix_stacks_in_any_order() -> None:
    assert strip_prefixes("gpu001: 3: boom")[:3] == (3, None, "boom")
    assert strip_prefixes("gpu001: 3: boom").host == "gpu001"
    pre = strip_prefixes("node3: [rank0]: RuntimeError: x")
    assert (pre.host, pre.rank, pre.body) == ("node3", 0, "RuntimeError: x")
    pre = strip_prefixes("[default3]:[rank11]: RuntimeError: x")
    assert (pre.local_rank, pre.rank, pre.body) == (3, 11, "RuntimeError: x")
    pre = strip_prefixes("2024-05-01 12:00:00,123 - [rank2]: ValueError: bad")
    assert (pre.time, pre.rank, pre.body) == ("2024-05-01 12:00:00,123", 2, "ValueError: bad")
    assert strip_prefixes("[1,3]<stderr>: y")[:3] == (None, 3, "y")


def test_things_that_are_not_host_prefixes_keep_their_text() -> None:
    for text in (
        "ib0: link down",
        "ERROR: x",
        "jinja2.exceptions.TemplateError: roles must alternate",
        "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal",
        "fp16: enabled",
    ):
        assert strip_prefixes(text).body == text


def test_shipper_json_record_with_epoch_ts() -> None:
    line = (
        '{"ts": 1714561200.5, "host": "gpu007", '
        '"line": "[rank3]: RuntimeError: CUDA error: an illegal memory access"}'
    )
    pre = strip_prefixes(line)
    assert pre.host == "gpu007" and pre.rank == 3
    assert pre.body == "RuntimeError: CUDA error: an illegal memory access"
    assert pre.time is not None and pre.time.startswith("2024-05-01T11:00:00")
    metrics = '{"step": 3, "loss": 1.0}'
    assert strip_prefixes(metrics).body == metrics


def test_hostlist_in_srun_verdict_names_real_nodes() -> None:
    nodes = ["gpu001", "gpu002", "gpu003"]
    lines = _lines(
        "0: step 10 loss 2.1",
        "srun: error: gpu[001-002]: tasks 0-1: Exited with exit code 1",
        "srun: error: gpu003: task 2: Terminated",
    )
    a = attribute(Registry.default(), None, lines, None, [], nodes)
    # (The first to exit is named in the summary, not excluded: being first is no evidence.)
    assert "task 0 on gpu001" in a.summary, a.summary
    assert "gpu[" not in a.summary and a.culprit_nodes == []


def test_traceback_under_host_and_rank_prefix_is_read() -> None:
    lines = _lines(
        "[node003] [rank0]: Traceback (most recent call last):",
        '[node003] [rank0]:   File "/home/u/train.py", line 12, in <module>',
        "[node003] [rank0]:     cfg['lr_sched']",
        "[node003] [rank0]: KeyError: 'lr_sched'",
        "srun: error: node003: task 0: Exited with exit code 1",
    )
    a = attribute(Registry.default(), None, lines, None, [], ["node003", "node004"])
    assert a.category.value == "application"
    assert any("KeyError" in e.text for e in a.evidence)


def test_glog_and_absl_prefixes_are_peeled_bare_or_in_brackets() -> None:
    """glog/absl (`I1216 09:16:24.842427 88121 trainer.py:606] `) and PyTorch c10d's
    bracketed form (`[W724 13:10:15.447000 20811 torch/distributed/run.py:793] `)."""
    pre = strip_prefixes(
        "I1216 09:16:24.842427 88121 trainer.py:606]   rank 0: step 1.94 (compute 1.19)"
    )
    assert (pre.time, pre.body) == ("1216 09:16:24.842427", "rank 0: step 1.94 (compute 1.19)")
    pre = strip_prefixes("0: [W724 13:10:15.447000 20811 torch/distributed/run.py:793] *****")
    assert (pre.task, pre.body) == (0, "*****")
    pre = strip_prefixes(
        "1: E0422 17:56:14.377000 33120 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: 1) local_rank: 1 (pid: 33144) of binary: /usr/bin/python3"
    )
    assert (pre.task, pre.body[:20]) == (1, "failed (exitcode: 1)")
    # (an exception's name or a word that starts like one is no prefix)
    assert strip_prefixes("Internal: failed call").body == "Internal: failed call"
    assert strip_prefixes("E1201 not a glog line").body == "E1201 not a glog line"
