"""The pattern registry's data: one catalogue entry (`PatternEntry`), one match of it on a line
(`PatternMatch`), the file format, and the error a bad file raises. `resurgo.detect.registry`
loads, checks and scans them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.literals import REGEX_FLAGS

Role = Literal["root", "cascade", "context"]
Scope = Literal["gpu", "node", "job", "shared", "unknown"]
Determinism = Literal["recurs", "transient", "unknown"]
Severity = Literal["fatal", "error", "warning"]

_ID = r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$"


class RegistryError(ValueError):
    """The registry file is missing, malformed or inconsistent (message says which entry)."""


class PatternEntry(BaseModel):
    """One failure signature."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID, max_length=64)
    regex: str = Field(min_length=1, max_length=2000)
    kind: AnomalyKind
    category: Category
    role: Role
    severity: Severity
    description: str = Field(min_length=1)
    examples: tuple[str, ...] = Field(min_length=1)
    near_misses: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Free-form markers, e.g. `checkpoint_save`, `checkpoint_load`, `nan`."""
    scope: Scope = "unknown"
    """What the failure is bound to: one `gpu`, one `node`, the `job` (its code, data,
    configuration or environment: the same fault wherever it runs), or a `shared` service
    (file system, registry, switch, site power: no node to blame)."""
    determinism: Determinism = "unknown"
    """Whether the same cause `recurs` on a retry as it is, is `transient`, or `unknown`."""
    source: str = ""
    """The public reference the signature comes from (vendor docs, project source, issue)."""

    @field_validator("category")
    @classmethod
    def _not_none(cls, value: Category) -> Category:
        if value == Category.NONE:
            raise ValueError("'none' is not a failure category")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value, REGEX_FLAGS)
        except (re.error, ValueError, OverflowError, RecursionError) as exc:
            raise ValueError(f"invalid regex: {exc}") from None
        return value


class PatternMatch(BaseModel):
    """One entry matching one line."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: AnomalyKind
    category: Category
    role: Role
    severity: Severity
    span: tuple[int, int]
    """Start and end of the match in the original line."""
    groups: dict[str, str] = Field(default_factory=dict)
    """Named groups that matched (e.g. `node`, `rank`, `xid`, `pci`, `peer`, `exit_code`)."""
    tags: tuple[str, ...] = ()


class RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    patterns: list[dict[str, Any]]


def first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}" if where else f"{first.get('msg')}{more}"
