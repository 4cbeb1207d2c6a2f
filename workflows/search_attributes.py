"""Search attribute keys: what the Temporal UI list can filter jobs by."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

CLUSTER = SearchAttributeKey.for_keyword("ResurgoCluster")
SLURM_JOB_ID = SearchAttributeKey.for_keyword("ResurgoSlurmJobId")
USER = SearchAttributeKey.for_keyword("ResurgoUser")
PARTITION = SearchAttributeKey.for_keyword("ResurgoPartition")
MODE = SearchAttributeKey.for_keyword("ResurgoMode")
STATE = SearchAttributeKey.for_keyword("ResurgoState")
ATTEMPT = SearchAttributeKey.for_int("ResurgoAttempt")
LAST_CATEGORY = SearchAttributeKey.for_keyword("ResurgoLastCategory")
NEEDS_APPROVAL = SearchAttributeKey.for_bool("ResurgoNeedsApproval")

ALL_KEYS: tuple[SearchAttributeKey, ...] = (  # type: ignore[type-arg]
    CLUSTER,
    SLURM_JOB_ID,
    USER,
    PARTITION,
    MODE,
    STATE,
    ATTEMPT,
    LAST_CATEGORY,
    NEEDS_APPROVAL,
)


def dev_server_flags() -> list[str]:
    """`--search-attribute` flags for `temporal server start-dev`."""
    kinds = {"KEYWORD": "Keyword", "INT": "Int", "BOOL": "Bool"}
    return [
        f"--search-attribute={key.name}={kinds[key.indexed_value_type.name]}" for key in ALL_KEYS
    ]
