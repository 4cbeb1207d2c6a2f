"""The audit store's table: the `audit_events` schema and the column limits every backend
enforces (VARCHARs compare byte-exact on MySQL, as on SQLite)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

# Column limits, enforced identically on every backend.
EVENT_ID_LEN = 255
CLUSTER_LEN = 128
WORKFLOW_ID_LEN = 255
TYPE_LEN = 64
PRODUCER_LEN = 64
MAX_SUMMARY_BYTES = 65_535  # MySQL TEXT
MAX_DATA_BYTES = 1024 * 1024  # serialized JSON; stored as MEDIUMTEXT on MySQL
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
MIN_YEAR = 1000  # MySQL DATETIME lower bound


class _ExactString(TypeDecorator[str]):
    """VARCHAR that compares byte-exact on MySQL (binary, no-pad collation), plain elsewhere.

    With MySQL's default collations 'A' equals 'a' and 'x' equals 'x ', which would make the unique
    `event_id` swallow distinct events and the filters disagree with SQLite.
    """

    impl = String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            collation = _mysql_exact_collation(dialect)
            return dialect.type_descriptor(
                mysql_dialect.VARCHAR(self.length, charset="utf8mb4", collation=collation)
            )
        return dialect.type_descriptor(String(self.length))


def _mysql_exact_collation(dialect: Dialect) -> str:
    version = dialect.server_version_info or ()
    if getattr(dialect, "is_mariadb", False):
        return "utf8mb4_nopad_bin" if version >= (10, 2) else "utf8mb4_bin"
    return "utf8mb4_0900_bin" if version >= (8, 0, 17) else "utf8mb4_bin"


metadata = MetaData()

audit_events = Table(
    "audit_events",
    metadata,
    Column(
        "id",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("event_id", _ExactString(EVENT_ID_LEN), nullable=False, unique=True),
    Column("cluster", _ExactString(CLUSTER_LEN), nullable=False, index=True),
    Column("job_id", BigInteger(), nullable=False, index=True),
    Column("workflow_id", _ExactString(WORKFLOW_ID_LEN), nullable=False, index=True),
    Column("attempt", Integer(), nullable=True),
    Column("type", _ExactString(TYPE_LEN), nullable=False, index=True),
    Column("producer", _ExactString(PRODUCER_LEN), nullable=False),
    Column(
        "at",
        DateTime().with_variant(mysql_dialect.DATETIME(fsp=6), "mysql", "mariadb"),
        nullable=False,
        index=True,
    ),
    Column("summary", Text(), nullable=False),
    Column(
        "data",
        Text().with_variant(mysql_dialect.MEDIUMTEXT(), "mysql", "mariadb"),
        nullable=False,
    ),
    Index("ix_audit_events_cluster_job_id_id", "cluster", "job_id", "id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)
