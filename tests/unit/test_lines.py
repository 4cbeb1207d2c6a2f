"""Line normalisation: decoding untrusted bytes and launcher prefixes."""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.detect import lines as lines_module
from resurgo.detect.lines import (
    MAX_LINE_BYTES,
    decode_line,
    host_of,
    parse_nccl_prefix,
    rank_of,
    sanitize_line,
    split_srun_label,
    strip_prefixes,
)

CONTROL = (
    {chr(c) for c in range(0x20) if c != 9} | {chr(0x7F)} | {chr(c) for c in range(0x80, 0xA0)}
)


# ---------------------------------------------------------------- srun labels
@pytest.mark.parametrize(
    ("line", "task", "rest"),
    [
        ("0: Traceback (most recent call last):", 0, "Traceback (most recent call last):"),
        (" 12: [rank12]: ValueError: bad", 12, "[rank12]: ValueError: bad"),
        ("  3: ", 3, ""),
        ("127: srun: error: node2: task 1: Exited with exit code 1", 127, "srun: error: node2: task 1: Exited with exit code 1"),
        ("12:34:56 INFO starting", None, "12:34:56 INFO starting"),
        ("1:text", None, "1:text"),
        ("node1:1234:5678 [0] NCCL INFO Bootstrap", None, "node1:1234:5678 [0] NCCL INFO Bootstrap"),
        ("", None, ""),
        ("x0: y", None, "x0: y"),
    ],
)  # fmt: skip
def test_split_srun_label(line: str, task: int | None, rest: str) -> None:
    assert split_srun_label(line) == (task, rest)


def test_strip_prefixes_reports_offset_of_body() -> None:
    line = " 1: [rank1]: ValueError: x"
    pre = strip_prefixes(line)
    assert (pre.task, pre.rank, pre.body) == (1, 1, "ValueError: x")
    assert line[pre.offset :] == pre.body
    plain = strip_prefixes("no prefix here")
    assert (plain.task, plain.rank, plain.offset, plain.body) == (None, None, 0, "no prefix here")


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[rank3]: Traceback (most recent call last):", 3),
        ("[rank3]:[E ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout", 3),
        ("[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", 7),
        ("2: [rank5]: RuntimeError: CUDA error: an illegal memory access was encountered", 5),
        ("[rank0] step=12 step_time_ms=85.2 node=node1", 0),
        ("some text [rank3]: later", None),
        ("[ranking] top-5", None),
        ("", None),
    ],
)  # fmt: skip
def test_rank_of(line: str, rank: int | None) -> None:
    assert rank_of(line) == rank


# ---------------------------------------------------------------- NCCL host prefix
def test_parse_nccl_prefix_warn_line() -> None:
    line = "node1:1234:5678 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<44196> with error 12"
    nccl = parse_nccl_prefix(line)
    assert nccl is not None
    assert (nccl.host, nccl.pid, nccl.tid, nccl.device) == ("node1", 1234, 5678, 0)
    assert nccl.rest.startswith("NCCL WARN NET/IB")
    assert host_of(line) == "node1"


def test_parse_nccl_prefix_after_labels_and_with_source_location() -> None:
    line = "3: gpu-node-3.cluster:812:1040 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : x"
    nccl = parse_nccl_prefix(line)
    assert nccl is not None
    assert (nccl.host, nccl.device) == ("gpu-node-3.cluster", 2)
    assert nccl.rest.startswith("transport/net_ib.cc:1696 NCCL WARN")


@pytest.mark.parametrize(
    "line",
    [
        "12:34:56 [0] something",  # a time, not a host
        "NCCL INFO Bootstrap : Using eth0",
        "node1:abc:5678 [0] NCCL INFO x",
        "",
    ],
)
def test_parse_nccl_prefix_rejects(line: str) -> None:
    assert parse_nccl_prefix(line) is None
    assert host_of(line) is None


# ---------------------------------------------------------------- decoding
def test_decode_line_replaces_invalid_utf8_and_strips_newline() -> None:
    assert decode_line(b"loss \xff\xfe ok\r\n") == "loss \ufffd\ufffd ok"
    assert decode_line("héllo ▌\n".encode()) == "héllo ▌"


def test_decode_line_removes_control_characters_and_escapes() -> None:
    assert decode_line(b"a\x00b\x07c\tD") == "abc\tD"
    assert decode_line(b"\x1b[31mERROR\x1b[0m: boom") == "ERROR: boom"
    assert decode_line(b"\x1b]0;title\x07text") == "text"
    assert decode_line(b" 10%|#  | 1/10\r 20%|## | 2/10") == " 10%|#  | 1/10  20%|## | 2/10"
    assert decode_line("a\u2028b\u0085c\ufeff".encode()) == "a bc"


def test_decode_line_caps_length_keeping_the_head() -> None:
    raw = b"x" * (MAX_LINE_BYTES + 1000)
    assert decode_line(raw) == "x" * MAX_LINE_BYTES
    cut = b"a" * (MAX_LINE_BYTES - 1) + "é".encode()  # the limit splits the two-byte "é"
    assert decode_line(cut) == "a" * (MAX_LINE_BYTES - 1)
    assert decode_line(b"abcdef", max_bytes=3) == "abc"


def test_decode_line_accepts_buffers() -> None:
    assert decode_line(bytearray(b"abc\n")) == "abc"
    assert decode_line(memoryview(b"abc\n")) == "abc"


def test_sanitize_line_caps_characters() -> None:
    assert sanitize_line("é" * 10, max_chars=4) == "éééé"
    assert sanitize_line("ok\x00\n") == "ok"


@settings(max_examples=300)
@given(st.binary(max_size=512))
def test_decode_line_never_raises_and_is_clean(raw: bytes) -> None:
    text = decode_line(raw)
    assert isinstance(text, str)
    assert not CONTROL & set(text)
    assert len(text) <= MAX_LINE_BYTES


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_prefix_helpers_never_raise(text: str) -> None:
    task, rest = split_srun_label(text)
    assert text.endswith(rest)
    if task is None:
        assert rest == text
    pre = strip_prefixes(text)
    assert text[pre.offset :] == pre.body
    rank_of(text)
    parse_nccl_prefix(text)
    host_of(text)
    sanitize_line(text)


_PREFIX_PARTS = [
    "0: ", " 12: ", "[rank3]: ", "[Rank 3] ", "[default1]:", "gpu-a01: ", "[gpu-a01] ", "{",
    '{"log": "', '"}', "node2:1234:5678 [0] ", "h1:1:2 [12] ", ":9 [3] ", " [1] ", "NCCL WARN x",
    "2024-05-01 12:00:00,123 ", "[12:00:00] ", "May  1 12:00:00 ", "text", " ", "\\u0020[0] ",
]  # fmt: skip


@settings(max_examples=2000)
@given(st.lists(st.sampled_from(_PREFIX_PARTS), max_size=8).map("".join))
def test_nccl_prefix_pre_test_changes_nothing(line: str) -> None:
    """`parse_nccl_prefix` skips peeling prefixes off lines without `:<tid> [<dev>] `; it must
    find exactly what matching the peeled body finds (JSON records included)."""
    body = strip_prefixes(line).body
    expected = lines_module._NCCL_PREFIX.match(body)
    got = parse_nccl_prefix(line)
    assert (got is None) == (expected is None)
    if got is not None and expected is not None:
        assert (got.host, got.rest) == (expected.group("host"), body[expected.end() :])
