"""A driver too old for the job's own build, on every node: the job's environment, not the site.

PyTorch's CUDA initialisation warns `The NVIDIA driver on your system is too old (found version
12020)` (c10/cuda/CUDAFunctions.cpp) when the CUDA runtime it was built with needs a newer
driver than the node has; the CUDA runtime's own `CUDA driver version is insufficient for CUDA
runtime version` says the same. On one node it is that node's image (an older driver after a
re-image); on every node of a cluster whose driver is uniform it is whoever chose the build
(attribution-labels.md tie-breaker 6). When the library that raised it lives in the job's own
environment (a virtualenv or conda environment the job script activates, or a package tree in
the user's home), the job installed a build for a newer CUDA than the site runs (PyTorch's
install matrix pairs each wheel's CUDA with a minimum driver): rebuild the environment, stop.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.events import Event
from resurgo.contracts import Category

DRIVER_TOO_OLD = frozenset({"cuda_driver_insufficient"})
# bash -x's trace of the job script activating its environment (`+ source /home/u/env/bin/
# activate`, `+ conda activate /scratch/u/envs/train`).
_ACTIVATE = re.compile(
    r"^\+* ?(?:source|\.) (?P<venv>/\S{1,300}?)/bin/activate\b"
    r"|^\+* ?conda activate (?P<conda>/\S{1,300})"
)
_PACKAGES = re.compile(r"(?P<path>/\S{1,300}?)/lib/python\d[\d.]{0,8}/site-packages/")
# A user's home directory (`/home/u/`, `/gpfs/home/u/`, `/users/u/`): what lies in it is the
# user's own (a package tree installed there, a quota reached writing there).
HOME_DIR = r"(?:/[\w.-]+)?/(?:home|homes|users?)/[\w.-]+/"
_HOME = re.compile("^" + HOME_DIR)


def _activated(a: Analysis) -> list[str]:
    prefixes = []
    for entry in [*a.header, *a.lines[:200]]:
        if "activate" in entry.text and (m := _ACTIVATE.match(entry.text.lstrip())) is not None:
            prefixes.append(m["venv"] or m["conda"])
    return prefixes


def built_for_newer_driver(a: Analysis, events: list[Event], summary: str) -> Verdict | None:
    """The driver-too-old error on every node, raised from the job's own environment."""
    said = [e for e in events if e.match.id in DRIVER_TOO_OLD]
    if not said:
        return None
    envs = _activated(a)
    for e in said:
        if (m := _PACKAGES.search(e.line.text)) is None:
            continue
        path = m["path"]
        if _HOME.match(path) or any(path == p or path.startswith(p + "/") for p in envs):
            return Verdict(
                Category.APPLICATION, "cuda_driver_insufficient|own_environment",
                f"{summary}: raised from the job's own environment ({path[-80:]}), built for "
                "a newer CUDA than the driver every node has; rebuild it for that driver",
                0.85,
            )  # fmt: skip
    return None
