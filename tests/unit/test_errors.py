"""One error root: transient vs permanent, and the non-retryable list derived from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from resurgo.activities.calls import NON_RETRYABLE
from resurgo.activities.errors import permanent_failures
from resurgo.errors import PermanentError, ResurgoError, TransientError, permanent_error_types
from resurgo.slurm.errors import CommandTimeout, JobGone, SchedulerUnavailable
from resurgo.sources.errors import SourceContractError, SourceUnavailable

REPO = Path(__file__).resolve().parents[2]


def permanent_classes_in_source() -> set[str]:
    """Every class anywhere in the source whose bases name a permanent error."""
    known = {"PermanentError"}
    classes: list[tuple[str, list[str]]] = []
    for path in (REPO / "resurgo").rglob("*.py"):
        if any(p.is_symlink() for p in [path, *path.parents]):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
                classes.append((node.name, bases))
    changed = True
    while changed:
        changed = False
        for name, bases in classes:
            if name not in known and known.intersection(bases):
                known.add(name)
                changed = True
    return known - {"PermanentError"}


def test_the_non_retryable_list_names_every_permanent_error() -> None:
    assert set(permanent_error_types()) == permanent_classes_in_source()
    assert list(permanent_error_types()) == NON_RETRYABLE
    assert {"JobGone", "ParseError", "PreconditionFailed", "ActionsNotAllowed"} <= set(
        NON_RETRYABLE
    )


@pytest.mark.parametrize("cls", [SchedulerUnavailable, CommandTimeout, SourceUnavailable])
def test_transient_errors_stay_retryable(cls: type[Exception]) -> None:
    assert issubclass(cls, TransientError) and not issubclass(cls, PermanentError)
    with pytest.raises(cls), permanent_failures():
        raise cls("slurmctld down")


@pytest.mark.parametrize("cls", [JobGone, SourceContractError])
def test_permanent_errors_leave_activities_non_retryable(cls: type[ResurgoError]) -> None:
    with pytest.raises(ApplicationError) as info, permanent_failures():
        raise cls("job 42 purged")
    assert info.value.non_retryable and info.value.type == cls.__name__
    assert "job 42 purged" in str(info.value)
