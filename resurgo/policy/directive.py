"""Read the opt-in directive from a job's `--comment`: the one validator for user directives.

The comment is written by any cluster user and read by a controller running as root, so this is
the trust boundary for it. Discovery reads every comment through `parse_directive`, and the
watch validates the directive's `progress_pattern` through `check_progress_pattern`, the same
function the validator uses, so the two can never disagree about what is usable.

Nothing here raises on any input: size and nesting depth are checked before the JSON parser
runs (a linear scan, no recursion), lone surrogates (which would fail later, when the workflow
input is serialised) and NaN/Infinity are refused, duplicate keys are refused (two readers could
see different directives), and every problem is a short sentence for the job owner.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from resurgo.contracts import Directive
from resurgo.detect.progress import CustomPattern, compile_progress_pattern

DIRECTIVE_KEYS = ("resurgo", "nvidia-recovery")
# A comment is user input: bound the work we do on it.
MAX_COMMENT_BYTES = 16 * 1024
# A directive is three levels deep ({"resurgo": {"straggler": {...}}}); anything much deeper is
# not a directive, and a deep one would exhaust the JSON parser's recursion.
MAX_DEPTH = 16
# User values quoted back in problem sentences are cut to this many characters.
MAX_QUOTED = 80


class DirectiveParse(BaseModel):
    """The result of reading one comment.

    `opted_in` is true when the comment names a directive key, even if the rest is broken: such a
    job must be reported, never silently ignored. `directive` is None when it could not be used.
    """

    opted_in: bool
    directive: Directive | None = None
    problems: list[str] = []


class _Refused(ValueError):
    """The JSON text is not acceptable (a reason for the job owner)."""


def mentions_directive(comment: str) -> bool:
    """Cheap pre-filter: could this comment be an opt-in at all?"""
    return any(key in comment for key in DIRECTIVE_KEYS)


def quoted(value: object) -> str:
    """A user value for a problem sentence: repr'd (escapes controls and surrogates), cut."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


def parse_directive(comment: str | None) -> DirectiveParse:
    """Read a directive; every problem is returned as a human-readable sentence."""
    if not comment or not mentions_directive(comment):
        return DirectiveParse(opted_in=False)
    if len(comment.encode("utf-8", "replace")) > MAX_COMMENT_BYTES:
        return DirectiveParse(
            opted_in=True, problems=[f"comment is larger than {MAX_COMMENT_BYTES} bytes"]
        )
    try:
        doc = load_json(comment)
    except _Refused as exc:
        return DirectiveParse(opted_in=True, problems=[str(exc)])
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
        names = ", ".join(quoted(name)[1:-1] for name in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        problems.append(f"unknown fields ignored: {names}{more}")
    fields = {k: v for k, v in body.items() if k in known}
    directive, field_problems = _validate_fields(fields)
    problems.extend(field_problems)
    return DirectiveParse(opted_in=True, directive=directive, problems=problems)


def load_json(text: str) -> Any:
    """`json.loads` for hostile text; raises `_Refused` (a ValueError) with the reason."""
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise _Refused(f"comment JSON is nested {depth} levels deep (at most {MAX_DEPTH})")
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _Refused:
        raise
    except json.JSONDecodeError as exc:
        raise _Refused(
            f"comment is not valid JSON: {exc.msg} at line {exc.lineno} col {exc.colno}"
        ) from None
    except (ValueError, RecursionError, OverflowError) as exc:
        # e.g. an integer of more digits than Python converts (sys.int_info.str_digits_check)
        raise _Refused(f"comment is not valid JSON: {str(exc)[:120]}") from None
    if (where := _lone_surrogate(doc)) is not None:
        raise _Refused(f"comment JSON holds a lone surrogate escape ({where}), not valid text")
    return doc


def nesting_depth(text: str) -> int:
    """The deepest `[`/`{` nesting outside strings: one pass, no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Refused(f"comment JSON gives the key {quoted(key)} twice")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise _Refused(f"comment JSON holds {name}, which is not a JSON number")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _lone_surrogate(doc: Any) -> str | None:
    """Where a string (key or value) of the document holds a lone surrogate, if anywhere."""
    pending: list[Any] = [doc]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return quoted(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def check_progress_pattern(pattern: object) -> tuple[CustomPattern | None, str | None]:
    """The compiled `progress_pattern`, or the problem with it (the validator's own check)."""
    try:
        return compile_progress_pattern(pattern), None
    except ValueError as exc:
        return None, str(exc)


def _validate_fields(fields: dict[str, Any]) -> tuple[Directive | None, list[str]]:
    """Validate; a bad value is reported, and the job is left alone (directive None)."""
    problems: list[str] = []
    pattern = fields.get("progress_pattern")
    if pattern is not None:
        _, problem = check_progress_pattern(pattern)
        if problem:
            problems.append(problem)
    try:
        directive = Directive.model_validate(fields)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(quoted(p)[1:-1] if isinstance(p, str) else str(p) for p in err["loc"])
            problems.append(
                f"{where or 'directive'}: {err['msg']} (got {quoted(err.get('input'))})"
            )
        return None, problems
    if problems:
        return None, problems
    return directive, problems
