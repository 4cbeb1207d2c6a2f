"""A fault in the rule engine costs one verdict, never the recovery.

Attribution reads evidence that any cluster user can shape. If a rule raises on some input
nobody foresaw, the live activity would fail the same way on every retry (the input does not
change) and the job would wait for an operator; offline, one bundle would end a whole scoring
run. Instead the engine answers `unknown` with confidence 0 and says why: the default policy
retries unknown failures within their budget and never excludes a node or stops a job on one.
The exception is logged with its traceback so the rule can be fixed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from resurgo.contracts import Anomaly, AnomalyKind, Attribution, Category

__all__ = ["ENGINE_FAULT", "survives_engine_faults"]

log = logging.getLogger(__name__)

ENGINE_FAULT = "attribution-error"

R = TypeVar("R")


def fault_verdict(anomaly: Anomaly | None, exc: BaseException) -> Attribution:
    return Attribution(
        kind=anomaly.kind if anomaly is not None else AnomalyKind.CRASH,
        category=Category.UNKNOWN,
        confidence=0.0,
        fingerprint=ENGINE_FAULT,
        summary=f"attribution failed ({type(exc).__name__}: {str(exc)[:200]}); treated as "
        "unknown, so no node is blamed and nothing is stopped",
    )


def survives_engine_faults(
    on_fault: Callable[[Attribution], R],
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Wrap an engine entry point whose 2nd positional argument is the anomaly (or None)."""

    def wrap(fn: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> R:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # any rule bug: see the module docstring
                log.exception("attribution rule failed; answering unknown")
                anomaly = args[1] if len(args) > 1 else kwargs.get("anomaly")
                return on_fault(fault_verdict(anomaly, exc))

        return guarded

    return wrap
