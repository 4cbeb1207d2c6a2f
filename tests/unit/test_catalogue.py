"""The failure catalogue: entries as data with scope, determinism and a public source."""

from __future__ import annotations

import pytest

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Category, LogLine
from resurgo.detect.registry import PatternEntry, Registry


def test_catalogue_files_are_loaded_into_the_one_registry() -> None:
    ids = {e.id for e in Registry.default()}
    assert {"argparse_error", "ddp_unused_parameters", "xid_reset_required"} <= ids


def test_every_example_matches_and_no_near_miss_does() -> None:
    """The catalogue's own lines: each example is found as its entry (through the prefilter),
    each near miss matches no entry. Loading skips this check; the tests keep it."""
    Registry.default().check_examples()


@pytest.mark.parametrize("entry", list(Registry.default()), ids=lambda e: e.id)
def test_every_entry_says_where_it_comes_from(entry: PatternEntry) -> None:
    assert len(entry.source) > 10
    if entry.role == "root" and entry.category.value not in ("unknown", "scheduler"):
        # A root cause of a known class says what it is bound to (gpu, node, job, shared).
        assert entry.scope != "unknown"


# Real message formats (CPython argparse, PyTorch reducer/grad_scaler/ProcessGroupWrapper,
# CUDA runtime, DeepSpeed loss scaler); every rank of a 2-node job says it (a symbol missing on
# one node only is that node's image, tested in causes).
APPLICATION_LINES = [
    "[rank0]: pretrain_gpt.py: error: unrecognized arguments: --lr-warmup-fraction 0.01",
    "[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration before "
    "starting a new one. This error indicates that your module has parameters that were not "
    "used in producing loss.",
    "[rank0]: RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "[rank0]: python: symbol lookup error: /opt/venv/lib/python3.11/site-packages/apex/amp_C.so: "
    "undefined symbol: _ZN3c104cuda20getCurrentCUDAStreamEa",
    "[rank0]: ValueError: Attempting to unscale FP16 gradients.",
    "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
    "collective: CollectiveFingerPrint(SequenceNumber=23, OpType=ALLREDUCE)",
    "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
    "Exiting run.",
    # A truncated checkpoint (CompVis/stable-diffusion#93), Lightning's config validation
    # (googlecolab/colabtools#1822).
    "[rank0]: RuntimeError: PytorchStreamReader failed reading zip archive: failed finding "
    "central directory",
    "[rank0]: lightning.fabric.utilities.exceptions.MisconfigurationException: You requested "
    "gpu: [0, 1, 2, 3, 4, 5, 6, 7]",
    # vLLM's sleep-mode allocator (verl-project/verl#302) and TensorFlow's allocator.
    "[rank0]: RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
    "[rank0]: tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
    "allocating tensor with shape[128,128,109,109] and type float on /job:localhost/replica:0/"
    "task:0/device:GPU:1 by allocator GPU_1_bfc",
    '[rank0]: "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"',
]


@pytest.mark.parametrize("line", APPLICATION_LINES)
def test_application_failures_are_recognised_and_stop(line: str) -> None:
    lines = [
        LogLine(source="job.log", line_no=1, text=line),
        LogLine(source="job.log", line_no=2, text=line.replace("[rank0]", "[rank1]")),
        LogLine(
            source="job.log", line_no=3, text="srun: error: n1: task 0: Exited with exit code 1"
        ),
        LogLine(
            source="job.log", line_no=4, text="srun: error: n2: task 1: Exited with exit code 1"
        ),
    ]
    a = attribute(Registry.default(), None, lines, None, [], ["n1", "n2"])
    assert a.category.value == "application"
    assert a.culprit_nodes == []
    assert default_advice(a).kind == AdviceKind.STOP


def test_leftover_pdb_prompt_is_the_application() -> None:
    lines = [
        LogLine(source="job.log", line_no=1, text="0: > /work/train.py(88)train_step()"),
        LogLine(source="job.log", line_no=2, text="0: (Pdb) "),
    ]
    found = {m.id for m in Registry.default().scan(lines[1].text)}
    assert "pdb_prompt" in found


def test_oom_from_another_process_is_the_nodes_state() -> None:
    text = (
        "[rank16]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 79.15 GiB of which 1.19 GiB is free. Process 3188211 has 61.20 "
        "GiB memory in use. Including non-PyTorch memory, this process has 16.70 GiB memory in use."
    )
    lines = [
        LogLine(source="job.log", line_no=1, text=text),
        LogLine(
            source="job.log", line_no=2, text="srun: error: n2: task 1: Exited with exit code 1"
        ),
    ]
    a = attribute(Registry.default(), None, lines, None, [], ["n1", "n2"])
    assert a.category.value == "system_software"
    assert default_advice(a).kind != AdviceKind.STOP


def test_ranks_stuck_in_different_collectives_are_the_applications_bug() -> None:
    # ProcessGroupNCCL's watchdog lines: rank 0 in a BROADCAST, the others in the ALLREDUCE
    # with the same sequence number (a rank-0-only collective in the job's code).
    work = (
        "[rank{r}]:[E0714 09:25:57.741549258 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=73312, OpType={op}, NumelIn={n}, "
        "NumelOut={n}, Timeout(ms)=600000) ran for 600096 milliseconds before timing out."
    )
    text = [
        work.format(r=r, op="BROADCAST" if r == 0 else "ALLREDUCE", n=1 if r == 0 else 23450816)
        for r in range(4)
    ]
    lines = [LogLine(source="job.log", line_no=i + 1, text=t) for i, t in enumerate(text)]
    a = attribute(Registry.default(), None, lines, None, [], ["n1", "n2"])
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP
