"""Text to the scanner's LogLine list: the one helper every attribution test builds input with."""

from __future__ import annotations

from resurgo.contracts import LogLine


def log_lines(text: str, source: str = "job.log") -> list[LogLine]:
    """One LogLine per line of `text`, numbered from 1 as a bundle's file would be."""
    return [LogLine(source=source, line_no=i + 1, text=t) for i, t in enumerate(text.splitlines())]
