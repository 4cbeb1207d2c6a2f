"""An illegal instruction in a job that compiled its own native extension at run time.

Frameworks build their CPU and CUDA ops on first use: PyTorch's `torch.utils.cpp_extension.load`
(`Emitting ninja build file .../torch_extensions/...`, `Building extension module cpu_adam...`,
`Loading extension module cpu_adam...`), DeepSpeed's op builder (`Time to load cpu_adam op`)
and ColossalAI's kernel loader (`[extension] Compiling or loading the JIT-built cpu_adam_x86
kernel during runtime now`). The build targets the CPU it runs on (DeepSpeed's builder compiles
CPU ops with `-march=native`) and lands in a cache under the user's home
(`TORCH_EXTENSIONS_DIR`, by default `~/.cache/torch_extensions`), which every node of the job
shares: a node of another CPU generation then loads code with instructions it lacks (AVX-512 on
an EPYC) and dies of SIGILL. The node is sound; the job's build is wrong for it, on every
attempt that reuses the cache: the job's software environment (attribution-labels.md:
application covers broken user environments, wrong CUDA arch and its like).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import Category

_BUILT_AT_RUN_TIME = re.compile(
    r"\b(?:Emitting ninja build file \S*torch_extensions|Building extension module \w+"
    r"|Loading extension module \w+|Time to load \w+ op:"
    r"|JIT-built \w+ kernel|Compiling or loading the JIT-built)"
)
_SIGILL = frozenset({"illegal_instruction", "python_fatal_signal", "srun_task_signal"})


def sigill_in_own_build(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the application's when the job died of SIGILL after building its own extension."""
    if v.category not in (Category.SYSTEM_SOFTWARE, Category.UNKNOWN):
        return v
    if any(e.source not in ("job.log", "scheduler.txt") for e in v.evidence):
        return v  # (a node's own files said something)
    sigill = [
        e for e in a.events
        if e.origin == "job" and e.root and e.match.id in _SIGILL
        and ("Illegal instruction" in e.message or "SIGILL" in e.message)
    ]  # fmt: skip
    if not sigill:
        return v
    built = next(
        (e for e in a.lines[:5000] if "xtension" in e.text or "JIT" in e.text or " op:" in e.text
         if _BUILT_AT_RUN_TIME.search(e.text[:2000])),
        None,
    )  # fmt: skip
    if built is None:
        return v
    return Verdict(
        Category.APPLICATION, "crash|sigill_in_own_build",
        "a process died of an illegal instruction after the job built its own native "
        "extension at run time: a build for one CPU, loaded from the shared cache on another "
        "(the job's software environment, not the node)", 0.8,
        ranks=v.ranks, evidence=[sigill[0].line, built], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
