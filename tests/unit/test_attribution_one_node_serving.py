"""A one-node GPU job as it is pasted with no scheduler record: the operator's header names its
single node beside `--nodes=1`, the driver state CUDA cannot initialise on is that node's, and an
error printed on what looks like a progress line (`generation failed at step 0/25`) counts no
step. Lines as ollama/llama.cpp and mold print them (driver-API error names)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_lines import bundle_verdict

HEADER = "# sbatch --nodes=1 --gres=gpu:8 --time=1-00:00:00 serve.sbatch   (job 22871, node hgx-h100-04, 8x H100 80GB HBM3 with NVSwitch)\n"
OLLAMA = (
    'time=2025-11-10T21:44:02.119Z level=INFO source=runner.go:67 msg="discovering available GPUs..."\n'
    "ggml_cuda_init: failed to initialize CUDA: system not yet initialized\n"
)


def test_cuda_not_initialising_on_the_one_named_node_excludes_it(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, HEADER + OLLAMA)
    assert got == ("crash", "system_software", ["hgx-h100-04"], "requeue_excluding_nodes")


@pytest.mark.parametrize(
    "header",
    [
        # (two nodes asked for: a single host in the note is not the allocation)
        HEADER.replace("--nodes=1", "--nodes=2"),
        # (no node count quoted)
        "# serve.sbatch (job 22871, node hgx-h100-04)\n",
    ],
)
def test_a_single_host_in_a_note_without_a_one_node_request_names_nothing(
    tmp_path: Path, header: str
) -> None:
    assert bundle_verdict(tmp_path, header + OLLAMA)[2] == []


def test_an_error_on_a_step_counter_line_is_no_progress(tmp_path: Path) -> None:
    job = (
        "INFO  worker gpu0 ready\n"
        "INFO  request model=cv:252914 (DreamShaper 8 LCM, SD 1.5) 1024x1024 steps=25 seed=2818011725\n"
        "ERROR generation failed at step 0/25: CUDA_ERROR_ILLEGAL_ADDRESS\n"
        "WARN  worker quarantined after fatal CUDA error; server exiting for restart\n"
    )
    kind, category, _, _ = bundle_verdict(tmp_path, job)
    assert (kind, category) != ("none", "none")
    assert kind == "crash"


CUT = (
    "[rank11]: Traceback (most recent call last):\n"
    '[rank11]:   File "./ms-swift/swift/trainers/mixin.py", line 801, in train\n'
)
EXITS = "srun: error: a100-g43: task 2: Exited with exit code 1\n"


@pytest.mark.parametrize(
    "note",
    [
        "# (operator) rank 11's traceback continues through the backward pass (inside SDPA attention) and ends in a CUDA out of memory error; the remaining frames were not retained.\n",
        "# operator note: the run aborts with CUDA out of memory reported for GPU 4 on the master node\n",
        "# operator note: the traceback ends in torch.OutOfMemoryError (CUDA out of memory).\n",
    ],
)
def test_a_note_that_the_cut_traceback_ended_in_a_cuda_oom_is_the_jobs(
    tmp_path: Path, note: str
) -> None:
    assert bundle_verdict(tmp_path, CUT + note + EXITS)[1:] == ("application", [], "stop")


@pytest.mark.parametrize(
    "note",
    [
        # (a run elsewhere without one says nothing of this run)
        "# previous run 6119820 (same model, nodes a100-g[11-14]) trained 3 days without OOM\n",
        # (the note makes it a consequence of something else)
        "# (operator) maintainer's diagnosis: the NCCL connection was not working, so the run fails with CUDA out of memory as a side effect\n",
    ],
)
def test_notes_that_do_not_say_this_run_died_of_its_own_oom_leave_it_unknown(
    tmp_path: Path, note: str
) -> None:
    assert bundle_verdict(tmp_path, CUT + note + EXITS)[1] != "application"
