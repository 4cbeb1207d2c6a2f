"""Heterogeneous jobs (`sbatch ... : ...`): one job of several components, `<id>+0`, `<id>+1`,
each a record of its own with its own job id, nodes and ExcNodeList.

Verified on Slurm 22.05 (this repo's cluster): `scontrol requeuehold <leader id>` requeues
every component; `scontrol update JobId=<leader id>+<offset> ExcNodeList=..` changes that
component alone. Resurgo follows the job through its leader (component 0), whose observation is
made to speak for the whole job: every component's nodes and exclusions, each component's
nodes kept apart (`het_nodes`) so that a culprit is excluded on the component that ran it.

Names, as Slurm prints them: the whole job is its leader's id (`85`: `HetJobId=85`, what
`scancel`, `scontrol requeue` and `sacct -j` take for every component, and what Resurgo shows
for the job in the CLI, API and console); one component is `85+1` (the JOBID column of `squeue`
and `sacct`), shown wherever a single component is meant (an exclusion). `85+1` given to the
API or CLI names the whole job. A component's own job id (`86`: the `job_id` of component
85+1 in `squeue --json`, JobId=86 in `scontrol show job`) names the whole job too, found
through what the workflow recorded (`components` in the `attempt_started` audit event: each
component's name, own job id and nodes), never guessed as leader + offset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resurgo.contracts import JobObservation

if TYPE_CHECKING:
    from resurgo.slurm.parsers import DiscoveredJob


def component_ref(leader: int, offset: int) -> str:
    """One component as Slurm prints it (`squeue`, `sacct`) and `scontrol` takes it: `85+1`."""
    return f"{leader}+{offset}"


def whole_job(leader: JobObservation, components: Sequence[JobObservation]) -> JobObservation:
    """The leader's observation with every component's nodes (`components` by offset, the
    leader first)."""
    if len(components) < 2:
        return leader
    nodes = list(dict.fromkeys(n for c in components for n in c.node_list))
    excluded = list(dict.fromkeys(n for c in components for n in c.exc_node_list))
    return leader.model_copy(
        update={
            "node_list": nodes,
            "exc_node_list": excluded,
            "num_nodes": sum(c.num_nodes for c in components),
            "het_nodes": [list(c.node_list) for c in components],
            "het_job_ids": [c.job_id for c in components],
        }
    )


def exclusions_by_component(
    wanted: Sequence[str], component_nodes: Sequence[Sequence[str]], components: int
) -> dict[int, set[str]]:
    """Which component (offset) excludes which of `wanted`: the component that ran the node;
    a node no component ran (unknown, or the job moved) goes to every component, so that no
    part of the job lands on it again."""
    found: dict[int, set[str]] = {offset: set() for offset in range(components)}
    for node in wanted:
        ran = [i for i, nodes in enumerate(component_nodes) if node in nodes and i < components]
        for offset in ran or range(components):
            found[offset].add(node)
    return {offset: nodes for offset, nodes in found.items() if nodes}


# `85+1` as `component_ref` writes it.
_COMPONENT = re.compile(r"([0-9]{1,19})\+([0-9]{1,10})")


def named_components(leader: int, job_ids: Sequence[int]) -> list[dict[str, object]]:
    """What `monitoring_started` records of a hetjob's components (the leader first), before
    any of them runs: `[{"component": "85+1", "job_id": 86}, ...]`; [] for other jobs. The
    audit store finds a component by that JSON text (`"job_id":86,` or `"job_id":86}`) before
    reading the event."""
    if len(job_ids) < 2:
        return []
    return [
        {"component": component_ref(leader, offset), "job_id": job_id}
        for offset, job_id in enumerate(job_ids)
    ]


def recorded_components(obs: JobObservation) -> list[dict[str, object]]:
    """What the `attempt_started` audit event records of a hetjob's components: as
    `named_components`, with each component's nodes (`"nodes": [...]`)."""
    if len(obs.het_nodes) < 2 or len(obs.het_job_ids) != len(obs.het_nodes):
        return []
    named = named_components(obs.job_id, obs.het_job_ids)
    pairs = zip(named, obs.het_nodes, strict=True)
    return [{**part, "nodes": list(nodes)} for part, nodes in pairs]


def listed_components(rows: Sequence[DiscoveredJob]) -> dict[int, list[int]]:
    """Each hetjob leader's components' own job ids by offset, from one discovery listing
    (`squeue --json`; the text listing has no hetjob fields: {}). A hetjob whose offsets do not
    run 0..n-1 (a component not listed) is left out rather than numbered wrongly."""
    found: dict[int, dict[int, int]] = {}
    for row in rows:
        if row.het_job_id is not None and row.het_job_offset is not None:
            found.setdefault(row.het_job_id, {})[row.het_job_offset] = row.job_id
    return {
        leader: [parts[i] for i in range(len(parts))]
        for leader, parts in found.items()
        if sorted(parts) == list(range(len(parts))) and parts.get(0) == leader
    }


def where_components_ran(obs: JobObservation) -> str:
    """`85+0: node1; 85+1: node3,node4` (the attempt_started summary of a hetjob)."""
    return "; ".join(
        f"{component_ref(obs.job_id, offset)}: {','.join(nodes) or '?'}"
        for offset, nodes in enumerate(obs.het_nodes)
    )


@dataclass(frozen=True)
class Component:
    """A hetjob component found by its own job id in what a workflow recorded."""

    job_id: int
    leader: int
    offset: int

    @property
    def ref(self) -> str:
        return component_ref(self.leader, self.offset)

    def sentence(self) -> str:
        return f"{self.job_id} is component {self.ref} of heterogeneous job {self.leader}"


def component_in(data: Mapping[str, object], job_id: int) -> Component | None:
    """The component whose own job id is `job_id`, in an `attempt_started` event's data (as
    `recorded_components` wrote it); None when that job id is not one of its components."""
    parts = data.get("components")
    if not isinstance(parts, list):
        return None
    for part in parts:
        if not isinstance(part, Mapping) or part.get("job_id") != job_id:
            continue
        m = _COMPONENT.fullmatch(str(part.get("component", "")))
        if m is not None:
            return Component(job_id, int(m[1]), int(m[2]))
    return None
