"""Text to the scanner's LogLine list: the one helper every attribution test builds input with,
and a bundle's worth of such text through `attribute`."""

from __future__ import annotations

from pathlib import Path

from resurgo.attribute.offline import ACTION_NAMES, analyse_bundle, default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import Attribution, LogLine
from resurgo.detect.registry import Registry


def log_lines(text: str, source: str = "job.log") -> list[LogLine]:
    """One LogLine per line of `text`, numbered from 1 as a bundle's file would be."""
    return [LogLine(source=source, line_no=i + 1, text=t) for i, t in enumerate(text.splitlines())]


def attribute_text(
    job: str, nodes: list[str], node_files: dict[str, str] | None = None, scheduler: str = ""
) -> Attribution:
    """`attribute` over a job's output, node files named as in a bundle (`dmesg_gpu01` →
    host gpu01, read from `dmesg_gpu01.txt`) and scheduler text, offline (no live anomaly)."""
    logs: dict[str, list[LogLine]] = {}
    for f, t in (node_files or {}).items():  # (a host's several files, as a bundle has them)
        logs.setdefault(f.split("_", 1)[1], []).extend(log_lines(t, f"{f}.txt"))
    return attribute(
        Registry.default(), None, log_lines(job), None, [], nodes,
        node_logs=logs, scheduler_lines=log_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


def first_action(a: Attribution) -> str:
    """What the default policy does with this verdict on the first failure (the label's name)."""
    return ACTION_NAMES[default_advice(a).kind]


def bundle_verdict(
    tmp_path: Path, job_log: str, scheduler: str | None = None, **files: str
) -> tuple[str, str, list[str], str]:
    """(kind, category, culprit nodes, action) of a bundle written to `tmp_path`: its job.log,
    scheduler.txt when given, and node files (`dmesg_gpu01` → `dmesg_gpu01.txt`)."""
    (tmp_path / "job.log").write_text(job_log)
    if scheduler is not None:
        (tmp_path / "scheduler.txt").write_text(scheduler)
    for name, text in files.items():
        (tmp_path / f"{name}.txt").write_text(text)
    v = analyse_bundle(tmp_path).as_json()
    return v["kind"], v["category"], v["culprit_nodes"], v["action"]
