"""Who may read a job's output lines through the API.

A job's output is written by its Slurm user and read by a root process; lines from it become
evidence (anomaly signals, attribution evidence) in the audit trail. The rule:

- `operator` and `admin` tokens read every job's evidence (they act on the cluster and need it);
- a `viewer` token reads the evidence of jobs whose Slurm user is in its `users` list (`"*"`:
  every user). With no list it reads every job's verdicts, actions and timeline, with the text
  of each output line withheld;
- a job whose user is unknown (audit events written before the user was recorded, a record that
  could not be read) counts as nobody's: only tokens with `"*"` read its lines.

Withholding replaces the text of every log-line-shaped value (`source`, `line_no`/`line`,
`text`) wherever it sits in a response, so a new event type that carries lines is covered too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from resurgo.api.auth import Principal, Role
from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEventType

__all__ = ["may_read_output", "owners", "shown_to", "withheld_note", "withhold_lines"]

M = TypeVar("M", bound=BaseModel)

_LINE_KEYS = ({"source", "line_no", "text"}, {"source", "line", "text"})


def may_read_output(principal: Principal, user: str | None) -> bool:
    if principal.role >= Role.OPERATOR or "*" in principal.users:
        return True
    return bool(user) and user in principal.users


def withheld_note(user: str | None) -> str:
    whose = f"user {user}'s" if user else "this"
    return f"[withheld: this token may not read {whose} job output]"


def withhold_lines(value: Any, note: str) -> Any:
    """`value` (JSON-shaped) with the text of every log line replaced by `note`."""
    if isinstance(value, Mapping):
        keys = set(value)
        if any(shape <= keys for shape in _LINE_KEYS) and isinstance(value.get("text"), str):
            return {**value, "text": note}
        return {k: withhold_lines(v, note) for k, v in value.items()}
    if isinstance(value, list):
        return [withhold_lines(v, note) for v in value]
    return value


def shown_to(principal: Principal, user: str | None, model: M) -> M:
    """`model` as `principal` may see it: unchanged, or with every output line withheld."""
    if may_read_output(principal, user):
        return model
    dumped = withhold_lines(model.model_dump(mode="json"), withheld_note(user))
    return type(model).model_validate(dumped)


async def owners(store: AuditStore, workflow_ids: Iterable[str]) -> dict[str, str | None]:
    """Each workflow's job user, as its `monitoring_started` event recorded it (None: unknown)."""

    def lookup() -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for wid in dict.fromkeys(workflow_ids):
            events = store.query(
                workflow_id=wid, types=[AuditEventType.MONITORING_STARTED], limit=1
            )
            user = events[0].data.get("user") if events else None
            found[wid] = user if isinstance(user, str) and user else None
        return found

    return await asyncio.to_thread(lookup)
