"""Who owns the software that failed on every node: the site's image, or the job's container.

attribution-labels.md tie-breaker 6: what the site sets on nodes (images, drivers, modules,
task prolog environment) is system_software; site software broken on every node of the job
leaves nothing to exclude and no retry can help: stop, naming all of the job's nodes (several
nodes sharing the same misconfiguration are all named). What the job sets (its container,
launch options) is the application's. Two joins, after the stages named a cause:

- `jobs_own_container`: the CUDA runtime newer than the node's driver ("CUDA driver version is
  insufficient for CUDA runtime version", "The NVIDIA driver on your system is too old") on
  every node, in a job that launches its own container image (`srun --container-image`,
  `singularity exec`, `apptainer run`, `docker run`): a container carries its own CUDA user-mode
  runtime while the kernel driver is the host's (NVIDIA Container Toolkit; CUDA Compatibility
  guide: an application built for a newer CUDA needs a newer driver), so the image the job chose
  is what has to change (nagadomi/nunif#702): application, stop.
- `container_without_gpus`: "Found no NVIDIA driver" on every node, in a job that launches its
  own Apptainer/Singularity container without `--nv`/`--nvccli` or a Docker/Podman container
  without `--gpus`/the NVIDIA runtime, while no node's own files show its driver missing: the
  container was started without the host's GPU driver passed in (Apptainer user guide, "GPU
  Support": `--nv` binds the driver libraries and devices; Docker's `--gpus`), which the job's
  launch line has to change: application, stop.
- `site_software_everywhere`: the site image's GPU software failing on every node of the job
  (each node's rank fails with the same driver, fabric-manager or CUDA-compatibility error, or
  every node's own journal shows nv-fabricmanager refusing the driver: NVIDIA/gpu-operator#544)
  and nothing else failing: system_software naming every node, the no-retry-helps key (stop).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.events import Event
from resurgo.contracts import Category
from resurgo.policy.decide import NO_RETRY_HELPS_KEY

# The site image's GPU software failing in the job's processes (the catalogue's driver, CUDA
# compatibility and fabric-manager entries).
GPU_SOFTWARE_FAULTS = frozenset(
    {
        "cuda_driver_insufficient",
        "cuda_driver_mismatch",
        "cuda_system_not_ready",
        "nvidia_driver_library_mismatch",
        "nvidia_driver_unavailable",
        # Other vendors' accelerator software, and the node's RDMA memory-lock limit (slurmd's
        # systemd unit): the site's setup on every node they fail on alike.
        "neuron_driver_missing",
        "rocblas_arch_library_missing",
        "memlock_limit_too_low",
        "ucx_devx_not_supported",
    }
)
# The CUDA runtime the process loaded is newer than the node's driver.
RUNTIME_NEWER_THAN_DRIVER = frozenset({"cuda_driver_insufficient"})
# A node's own log showing its image's GPU software broken (scope node in the catalogue).
NODE_IMAGE_FAULTS = frozenset({"fabric_manager_driver_mismatch", "nvidia_driver_library_mismatch"})
# The job launching its own container: pyxis's `--container-image`, Apptainer/Singularity,
# Docker/Podman, enroot, Shifter (their documented command lines).
_CONTAINER_LAUNCH = re.compile(
    r"--container-image[= ]|\b(?:singularity|apptainer) (?:exec|run|shell)\b|"
    r"\b(?:docker|podman) run\b|\benroot start\b|\bshifter\b.{0,40}--image[= ]"
)
# The GPU passthrough options of those launchers (Apptainer `--nv`/`--nvccli`, Docker/Podman
# `--gpus`, `--runtime=nvidia`, CDI `--device nvidia.com/gpu=...`); pyxis/enroot mount the
# GPUs by themselves.
_NO_GPU_LAUNCH = re.compile(
    r"\b(?:singularity|apptainer) (?:exec|run|shell)\b|\b(?:docker|podman) run\b"
)
_GPU_PASSTHROUGH = re.compile(
    r"(?<![\w-])--(?:nv|nvccli|gpus)\b|--runtime[= ]nvidia|nvidia\.com/gpu"
)
NO_DRIVER = frozenset({"nvidia_driver_unavailable"})
# How many of the output's lines (and the operator's notes) to read for the launch command.
LAUNCH_LINES = 200


def jobs_own_container(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the application's when the CUDA runtime that outran the driver everywhere is
    the one in the container the job chose."""
    if v.category != Category.SYSTEM_SOFTWARE or v.key.startswith("shared|"):
        return v
    site = _site_failures(a)
    if not site or not all(e.match.id in RUNTIME_NEWER_THAN_DRIVER for e in site):
        return v
    job = a.job_nodes()
    if v.culprits and job and set(v.culprits) < set(job):
        return v  # (some nodes only: those nodes' drivers)
    launch = next(
        (x for x in [*a.header, *a.lines[:LAUNCH_LINES]] if _CONTAINER_LAUNCH.search(x.text)),
        None,
    )
    if launch is None:
        return v
    return Verdict(
        Category.APPLICATION, f"job_container|{site[0].match.id}",
        f"{site[0].message[:200]}: the CUDA runtime in the container the job launches is newer "
        "than the nodes' driver; the job's image has to change", 0.85,
        ranks=v.ranks, evidence=[site[0].line, launch, *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def container_without_gpus(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the application's when every node's ranks found no driver inside a container the
    job launched without passing the GPUs in, and no node's own files say its driver is gone."""
    if v.category != Category.SYSTEM_SOFTWARE or v.key.startswith("shared|"):
        return v
    site = _site_failures(a)
    if not site or not all(e.match.id in NO_DRIVER for e in site):
        return v
    if any(e.match.id in NO_DRIVER for e in a.node_events):
        return v  # (the host's own driver is missing: the node's software)
    launches = [
        x for x in [*a.header, *a.lines[:LAUNCH_LINES]] if _NO_GPU_LAUNCH.search(x.text)
    ]  # fmt: skip
    if not launches or any(_GPU_PASSTHROUGH.search(x.text) for x in launches):
        return v
    return Verdict(
        Category.APPLICATION, f"job_container|{site[0].match.id}",
        f"{site[0].message[:200]}: the job starts its container without the GPUs passed in "
        "(Apptainer --nv, Docker --gpus); the job's launch line has to change", 0.85,
        ranks=v.ranks, evidence=[site[0].line, launches[0], *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def site_software_everywhere(a: Analysis, v: Verdict) -> Verdict:
    """`v` naming every node of the job, and no retry, when the site image's GPU software
    failed on each of them and nothing else failed."""
    if v.category != Category.SYSTEM_SOFTWARE or v.key == NO_RETRY_HELPS_KEY:
        return v
    if v.key.startswith("shared|"):
        return v
    site = _site_failures(a)
    if not site:
        return v
    said = {n for e in site if isinstance(n := event_node(a, e), str)}
    shown = {
        e.node: e for e in a.node_events
        if e.match.id in NODE_IMAGE_FAULTS and e.node is not None and a.in_job(e.node)
    }  # fmt: skip
    nodes = said | set(shown)
    actors = {e.actor for e in site if e.actor is not None}
    job = a.job_nodes()
    if len(nodes) < 2 or not set(job) <= nodes:
        return v
    if not a.node_list and len(actors) < len(nodes):
        return v  # (without the node list, one failing rank per node named)
    if any(a.node_of_actor(x) not in said for x in a.actors() - actors):
        return v  # (a rank that did not fail with it, on a node none of whose ranks did)
    culprits = sorted(nodes)
    return Verdict(
        Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
        f"{v.summary}: the site's software is broken on every node of the job "
        f"({', '.join(culprits)})", 0.85, culprits=culprits, ranks=v.ranks,
        evidence=[*[e.line for e in shown.values()][:4], *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def _site_failures(a: Analysis) -> list[Event]:
    """The job's own failures when every one of them is the site image's GPU software; else
    none."""
    cut = a.kill_order
    failed = [
        e for e in a.events
        if e.origin == "job" and e.root and e.serious and (cut is None or e.order <= cut)
    ]  # fmt: skip
    if not failed or not all(e.match.id in GPU_SOFTWARE_FAULTS for e in failed):
        return []
    return failed
