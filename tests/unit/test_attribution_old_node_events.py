"""Lines that look like faults but are not the failure: a machine check notification beside
corrected errors, a port that went down and came back long before the job failed, a subnet
manager's failover notice. Real lines (arch/x86/kernel/cpu/mce/core.c, drivers/edac,
drivers/infiniband/core/cache.c, NVRM Xid, NCCL's net_ib.cc async event thread)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.rules import attribute
from resurgo.contracts import Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["sn0001", "sn0007", "sn0042", "sn0051"]
JOB = """\
0: [rank0] step 40 lm_loss 2.0871 aux_loss 0.0116 4.40 s/step
41: [rank331]: RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution
40: [rank325]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
srun: error: sn0042: task 41: Exited with exit code 1
0: slurmstepd: error: *** STEP 4409120.0 ON sn0001 CANCELLED AT 2024-11-11T10:02:20 ***
"""
XID = "[Mon Nov 11 10:02:11 2024] NVRM: Xid (PCI:0000:5d:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 11(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)\n"
CORRECTED = (
    "[Mon Nov 11 06:41:52 2024] mce: [Hardware Error]: Machine check events logged\n"
    "[Mon Nov 11 06:41:52 2024] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#1_Chan#0_DIMM#0 (channel:0 slot:0 page:0x2f11c0a offset:0x240 grain:32 syndrome:0x0)\n"
)


def _flap(down: str, up: str | None) -> str:
    text = f"[{down} 2024] mlx5_core 0000:9a:00.0 mlx5_4: Port: 1 Link DOWN\n"
    return text + (
        f"[{up} 2024] mlx5_core 0000:9a:00.0 mlx5_4: Port: 1 Link ACTIVE\n" if up else ""
    )


def _run(node_files: dict[str, str]) -> Attribution:
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in node_files.items()}
    return attribute(Registry.default(), None, _lines(JOB), None, [], NODES, node_logs=logs)


def test_a_machine_check_notification_beside_corrected_errors_is_not_a_host_fault() -> None:
    a = _run({"sn0042": XID, "sn0007": CORRECTED})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["sn0042"])


def test_an_uncorrected_machine_check_still_names_its_node() -> None:
    fatal = "[Mon Nov 11 10:02:05 2024] mce: [Hardware Error]: CPU 54: Machine Check Exception: 5 Bank 13: be00000001010091\n"
    a = _run({"sn0042": XID, "sn0007": fatal})
    assert "sn0007" in a.culprit_nodes


def test_a_port_back_up_the_evening_before_the_failure_is_history() -> None:
    a = _run({"sn0042": XID, "sn0051": _flap("Sun Nov 10 20:31:18", "Sun Nov 10 20:31:24")})
    assert a.culprit_nodes == ["sn0042"]


def test_a_port_still_down_or_back_only_at_the_failure_stays_evidence() -> None:
    still_down = _run({"sn0042": XID, "sn0051": _flap("Sun Nov 10 20:31:18", None)})
    assert "sn0051" in still_down.culprit_nodes
    at_failure = _run(
        {"sn0042": XID, "sn0051": _flap("Mon Nov 11 10:01:50", "Mon Nov 11 10:01:58")}
    )
    assert "sn0051" in at_failure.culprit_nodes


def test_a_port_down_again_after_coming_back_is_flapping_not_recovered() -> None:
    flapping = _flap("Sun Nov 10 20:31:18", "Sun Nov 10 20:31:24") + _flap(
        "Sun Nov 10 22:02:00", None
    )
    a = _run({"sn0042": XID, "sn0051": flapping})
    assert "sn0051" in a.culprit_nodes


def test_a_subnet_managers_failover_notice_is_not_a_port_fault() -> None:
    # libibverbs names IBV_EVENT_CLIENT_REREGISTER "client reregistration": the SM asks ports
    # to re-register after a failover; training rode through it.
    notice = "lc-09:3321:3390 [0] transport/net_ib.cc:91 NCCL WARN NET/IB : mlx5_0:1 Got async event : client reregistration"
    fault = notice.replace("client reregistration", "port error")
    ids = {m.id for m in Registry.default().scan(notice)}
    assert "nccl_ib_async_event" not in ids
    assert "nccl_ib_async_event" in {m.id for m in Registry.default().scan(fault)}
