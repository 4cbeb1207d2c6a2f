"""Audit event types are one enum: every type the workflow writes is a member, and nothing
outside the enum's own module spells a type as a bare string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from resurgo.contracts import AuditEvent, AuditEventType

REPO = Path(__file__).resolve().parents[2]
READERS = ["workflows", "api", "worker", "devstack", "resurgo/policy", "cli"]


def test_a_misspelt_type_is_refused() -> None:
    base = {"event_id": "x", "cluster": "c", "job_id": 1, "workflow_id": "w", "producer": "p"}
    assert AuditEvent(**base, type="anomaly").type is AuditEventType.ANOMALY
    with pytest.raises(ValidationError):
        AuditEvent(**base, type="anomally")


def test_no_reader_compares_against_a_bare_type_string() -> None:
    names = "|".join(t.value for t in AuditEventType)
    pattern = re.compile(rf'(\.type|\bt) (==|!=|in) \(?"({names})"')
    hits = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in READERS
        for path in (REPO / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_the_workflow_writes_only_enum_members() -> None:
    calls = re.compile(r'self\._(audit|event)\(\s*"')
    for path in (REPO / "workflows").glob("*.py"):
        assert not calls.search(path.read_text()), path
