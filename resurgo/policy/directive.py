"""Parse the opt-in directive from a job's `--comment` (pure; untrusted input)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from resurgo.contracts import Directive

DIRECTIVE_KEYS = ("resurgo", "nvidia-recovery")
# Slurm truncates nothing we care about, but a comment is user input: bound the work we do on it.
MAX_COMMENT_BYTES = 16 * 1024


class DirectiveParse(BaseModel):
    """The result of reading one comment.

    `opted_in` is true when the comment names a directive key, even if the rest is broken: such a
    job must be reported, never silently ignored. `directive` is None when it could not be used.
    """

    opted_in: bool
    directive: Directive | None = None
    problems: list[str] = []


def mentions_directive(comment: str) -> bool:
    """Cheap pre-filter: could this comment be an opt-in at all?"""
    return any(f'"{key}"' in comment or key in comment for key in DIRECTIVE_KEYS)


def parse_directive(comment: str | None) -> DirectiveParse:
    """Read a directive; every problem is returned as a human-readable sentence."""
    if not comment or not mentions_directive(comment):
        return DirectiveParse(opted_in=False)
    if len(comment.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
        return DirectiveParse(
            opted_in=True, problems=[f"comment is larger than {MAX_COMMENT_BYTES} bytes"]
        )
    try:
        doc = json.loads(comment)
    except json.JSONDecodeError as exc:
        return DirectiveParse(
            opted_in=True,
            problems=[f"comment is not valid JSON: {exc.msg} at line {exc.lineno} col {exc.colno}"],
        )
    if not isinstance(doc, dict):
        return DirectiveParse(opted_in=True, problems=["comment JSON must be an object"])
    present = [key for key in DIRECTIVE_KEYS if key in doc]
    if not present:
        return DirectiveParse(opted_in=False)
    problems: list[str] = []
    if len(present) > 1:
        problems.append(f"both {present[0]!r} and {present[1]!r} given; using {present[0]!r}")
    body = doc[present[0]]
    if not isinstance(body, dict):
        return DirectiveParse(
            opted_in=True, problems=[*problems, f"{present[0]!r} must be a JSON object"]
        )
    known = set(Directive.model_fields)
    unknown = sorted(set(body) - known)
    if unknown:
        problems.append(f"unknown fields ignored: {', '.join(unknown)}")
    fields = {k: v for k, v in body.items() if k in known}
    directive, field_problems = _validate_fields(fields)
    problems.extend(field_problems)
    return DirectiveParse(opted_in=True, directive=directive, problems=problems)


def _validate_fields(fields: dict[str, Any]) -> tuple[Directive | None, list[str]]:
    """Validate; a bad value is reported, and the job is left alone (directive None)."""
    problems: list[str] = []
    pattern = fields.get("progress_pattern")
    if pattern is not None:
        problem = _check_progress_pattern(pattern)
        if problem:
            problems.append(problem)
    try:
        directive = Directive.model_validate(fields)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "directive"
            problems.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
        return None, problems
    if problems:
        return None, problems
    return directive, problems


def _check_progress_pattern(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return "progress_pattern must be a string"
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"progress_pattern is not a valid regular expression: {exc}"
    if compiled.groups < 1:
        return "progress_pattern needs a capturing group for the iteration number"
    return None
