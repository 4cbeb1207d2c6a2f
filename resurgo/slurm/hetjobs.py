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
API or CLI names the whole job. The component's own job id (`86`) is Slurm-internal.
"""

from __future__ import annotations

from collections.abc import Sequence

from resurgo.contracts import JobObservation


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
