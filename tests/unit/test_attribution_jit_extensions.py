"""SIGILL after the job built its own native extension at run time is the job's build, not the
node (DeepSpeed's op builder compiles with -march=native into the shared torch_extensions
cache). Lines as torch.utils.cpp_extension, DeepSpeed, ColossalAI, faulthandler and srun print
them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

NODES = ["c-gpu71", "c-gpu74"]
BUILDS = {
    "colossalai": "[c-gpu71] [extension] Compiling or loading the JIT-built cpu_adam_x86 kernel during runtime now\n"
    "[c-gpu74] [extension] Loading the JIT-built cpu_adam_x86 kernel during runtime now\n",
    "torch": "[c-gpu71] Emitting ninja build file /home/u1/.cache/torch_extensions/py310_cu121/cpu_adam/build.ninja...\n"
    "[c-gpu71] Building extension module cpu_adam...\n"
    "[c-gpu74] Loading extension module cpu_adam...\n"
    "[c-gpu74] Time to load cpu_adam op: 2.41 seconds\n",
}
SIGILL = """\
[c-gpu71] Epoch 0:   0%|          | 0/3410 [00:00<?, ?it/s]
[c-gpu74] Fatal Python error: Illegal instruction
[c-gpu74]   File "/opt/venv/lib/python3.9/site-packages/colossalai/nn/optimizer/cpu_adam.py", line 174 in step
[c-gpu74] ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -4) local_rank: 0 (pid: 19020) of binary: /opt/venv/bin/python
srun: error: c-gpu74: task 1: Exited with exit code 1
"""


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_sigill_after_the_jobs_own_run_time_build_is_the_applications(build: str) -> None:
    a = attribute_text(BUILDS[build] + SIGILL, NODES)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.CRASH, Category.APPLICATION, [])
    assert "illegal instruction" in a.summary and first_action(a) == "stop"


def test_sigill_without_a_build_of_the_jobs_stays_the_nodes() -> None:
    a = attribute_text(SIGILL, NODES)
    assert a.category != Category.APPLICATION, a.summary


def test_a_node_file_naming_the_fault_outweighs_the_build() -> None:
    dmesg = "[Tue Aug  1 10:16:09 2023] traps: python[19020] trap invalid opcode ip:7f6e2c1b4a10 sp:7ffd2c9e8c40 error:0 in libtorch_cpu.so[7f6e29a00000+1e000000]\n"
    a = attribute_text(
        BUILDS["torch"] + SIGILL,
        NODES,
        {
            "dmesg_c-gpu74": dmesg
            + "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: be00000000800400\n"
        },
    )
    assert a.category != Category.APPLICATION, a.summary
