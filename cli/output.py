"""How the CLI prints: text from users is never read as markup, and piped output is plain.

Every console here has rich markup, emoji codes and highlighting off: job names, log lines and
error messages (`expected [batch, 256] features`, `[/opt/data]`, `:fire:`) print as written.
Styles come only from `Text(..., style=...)`. When stdout is not a terminal, tables print as
tab-separated values (header first, one row a line, nothing wrapped or cut) and other text is
never wrapped, so `resurgo audit 42 | grep "uncorrectable ECC"` finds what the table showed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from resurgo.cli.exits import ExitCode

if TYPE_CHECKING:  # rich.table loads with the first table a command builds (20 ms)
    from rich.table import Table

__all__ = ["PlainWhenPiped", "console", "err", "fail", "plain_cell", "show", "tsv", "warn"]


class PlainWhenPiped(Console):
    """A console whose every `print` is plain when its file is not a terminal: a table alone is
    tab-separated values, anything else is never wrapped or cropped. A recording console (an
    export, a test) draws as a terminal would."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if not (self.is_terminal or self.record):
            if len(objects) == 1 and _is_table(objects[0]):
                self.file.write(tsv(objects[0]) + "\n")
                self.file.flush()
                return
            kwargs.setdefault("soft_wrap", True)
            kwargs.setdefault("crop", False)
        super().print(*objects, **kwargs)


def _is_table(renderable: object) -> TypeGuard[Table]:
    module = sys.modules.get("rich.table")  # never imported: nothing here is a Table
    return module is not None and isinstance(renderable, module.Table)


def _console(stderr: bool) -> Console:
    return PlainWhenPiped(stderr=stderr, markup=False, emoji=False, highlight=False)


console = _console(stderr=False)
err = _console(stderr=True)


def plain_cell(cell: Any) -> str:
    """One cell as a TSV field: its plain text with tabs and line breaks escaped."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")


def tsv(table: Table) -> str:
    """The table as tab-separated values: its header line (if shown), then one line a row."""
    columns = table.columns
    lines = ["\t".join(plain_cell(c.header) for c in columns)] if table.show_header else []
    cells = [list(c.cells) for c in columns]
    for row in range(table.row_count):
        lines.append("\t".join(plain_cell(col[row]) if row < len(col) else "" for col in cells))
    return "\n".join(lines)


def show(renderable: RenderableType, out: Console | None = None) -> None:
    """Print a table or text: as drawn on a terminal, plain (TSV, unwrapped) when piped."""
    out = out or console
    # Ours decide for themselves; another recording console (an export, a test) wants the drawn
    # table, as a terminal does.
    if isinstance(out, PlainWhenPiped) or out.is_terminal or out.record:
        out.print(renderable)
    elif _is_table(renderable):
        out.file.write(tsv(renderable) + "\n")
        out.file.flush()
    else:
        out.print(renderable, soft_wrap=True, crop=False)


def warn(message: str) -> None:
    err.print(Text(f"warning: {message}", style="yellow"), soft_wrap=True)


def fail(message: str, code: ExitCode = ExitCode.FAILURE) -> NoReturn:
    """Print `error: <message>` on stderr (literally) and end the command with `code`."""
    err.print(Text(f"error: {message}", style="red"), soft_wrap=True)
    raise typer.Exit(int(code))
