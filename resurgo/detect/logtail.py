"""Incremental reading of a job's output file from a byte cursor.

Handles what real job logs do: files that appear late, truncation and replacement (new inode),
partial last lines (left for the next read), invalid UTF-8 and lines of many megabytes (the head
is kept, the rest skipped without buffering it).

The path is the job owner's choice: reads pass the job's user as `owner`, and the runner
refuses (`OutputRefused`) anything but a regular file of that user's (see
resurgo.slurm.output_files).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from resurgo.contracts import LogCursor
from resurgo.detect.lines import decode_line
from resurgo.slurm.runner import CommandRunner

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class TailRead:
    lines: list[tuple[int, str]]
    cursor: LogCursor
    at_eof: bool
    reset: bool = False


async def read_new_lines(
    runner: CommandRunner,
    cursor: LogCursor,
    *,
    max_bytes: int = CHUNK_BYTES,
    owner: str | int | None = None,
) -> TailRead:
    """Read the complete lines after `cursor`; never raises for a missing file.

    `owner`: the job's user, whom the file must belong to (None: no owner check)."""
    try:
        data, size, inode = await runner.read_file(
            cursor.path, cursor.offset, max_bytes, owner=owner
        )
    except FileNotFoundError:
        return TailRead([], cursor, at_eof=True)
    reset = False
    if (cursor.inode is not None and inode != cursor.inode) or size < cursor.offset:
        # Truncated or replaced: start over from the top of the new file.
        cursor = LogCursor(path=cursor.path, offset=0, line_no=0, inode=inode)
        data, size, inode = await runner.read_file(cursor.path, 0, max_bytes, owner=owner)
        reset = True
    offset, line_no, in_long = cursor.offset, cursor.line_no, cursor.in_long_line
    read_to_end = cursor.offset + len(data) >= size
    lines: list[tuple[int, str]] = []
    start = 0
    while True:
        newline = data.find(b"\n", start)
        if newline < 0:
            break
        if not in_long:
            line_no += 1
            lines.append((line_no, decode_line(data[start:newline])))
        in_long = False
        start = newline + 1
    consumed = start
    rest = len(data) - start
    if rest >= MAX_LINE_BYTES and not in_long:
        # An over-long line: scan its head now and skip the remainder as it arrives.
        line_no += 1
        lines.append((line_no, decode_line(data[start : start + MAX_LINE_BYTES])))
        in_long = True
        consumed = len(data)
    elif in_long:
        consumed = len(data)
    offset += consumed
    new_cursor = LogCursor(
        path=cursor.path, offset=offset, line_no=line_no, inode=inode, in_long_line=in_long
    )
    # At EOF when this read reached the end of the file: whatever is left unconsumed is a
    # partial last line, which waits for its newline.
    return TailRead(lines, new_cursor, at_eof=read_to_end, reset=reset)


async def read_until_eof(
    runner: CommandRunner, cursor: LogCursor, *, owner: str | int | None = None
) -> AsyncIterator[TailRead]:
    """Successive reads from `cursor` until the end of the file.

    A read can hold no complete line (the middle of a huge line being skipped) without being
    the end, so only EOF, or a read that made no progress, stops it.
    """
    while True:
        before = cursor.offset
        got = await read_new_lines(runner, cursor, owner=owner)
        cursor = got.cursor
        yield got
        if got.at_eof or (cursor.offset == before and not got.reset):
            return


async def end_of_output(
    runner: CommandRunner, cursor: LogCursor, *, owner: str | int | None = None
) -> LogCursor:
    """The cursor at the end of the file's complete lines, read on from `cursor` (the lines are
    counted, not kept): where output written from now on begins."""
    async for got in read_until_eof(runner, cursor, owner=owner):
        cursor = got.cursor
    return cursor
