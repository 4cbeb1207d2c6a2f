"""Python tracebacks in a job's output: frames, the exception line, and whose code raised it.

`job_log.scan_job` follows tracebacks per actor with a `TracebackTracker` (a frame in a save
function marks an error raised while saving a checkpoint), and classifies an exception no
registry entry knows by where it was raised and by whom:

- raised in the job's own code (the innermost frame is not an installed library) → the
  application's;
- raised by an installed library while it checked what the job's code handed it (the raising
  function validates or checks, or the exception's type names a configuration or usage error)
  → the application's too: the same arguments are rejected on any node;
- anything else → of unknown cause.

Kept apart because it is about Python's traceback format only, not Slurm's or NCCL's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.registry import PatternMatch

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,500})", line \d+, in (?P<func>[\w<>.]+)')
_LIBRARY_PATH = re.compile(
    r"/(?:site|dist)-packages/|/lib/python\d[\d.]*/|^<frozen |^<string>$|/usr/lib/"
)
# (rich's boxed tracebacks, printed by accelerate and many trainers, drop the colon:
# `╭──── Traceback (most recent call last) ────╮`, frames `│ /home/u/train.py:88 in main │`.)
_TRACEBACK = re.compile(r"\bTraceback \(most recent call last\)(?::|\s*─)")
# (A long path pushes the function's name onto the box's next line: `...xla_bridge.py:879 in │`.)
# (`\s*(?:│\s*)?$`, not `\s*│?\s*$`: one way through a long blank run, not every split of it)
_RICH_FRAME = re.compile(
    r"^│ (?P<path>[^\s│]{1,500}\.py):\d+ in(?: (?P<func>[\w<>.]+))?\s*(?:│\s*)?$"
)
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Za-z_]\w*(?:Error|Exception))(?::|$)")
_SAVE_FUNC = re.compile(r"(?i)save|persist|serialize|dump_state")
# A library function whose job is to check its caller's input (Lightning's
# `_validate_srun_variables`, HF's `_check_and_enable_sdpa`, `verify_config`): what it raises
# is a verdict on the arguments, settings or data the job passed.
_VALIDATING_FUNC = re.compile(
    r"(?i)^_*(?:validate|check|verify|ensure|assert|sanity)|_(?:validate|validation|check)"
    r"(?:_|$)|^_*(?:parse_args|post_init|__post_init__)$"
)
# Exception types that name a configuration or usage error (Lightning's
# `MisconfigurationException`, Hydra's `ConfigCompositionException`, pydantic's
# `ValidationError`, HF's `HFValidationError`, `click.UsageError`, datasets'
# `DatasetGenerationError`/`DataFilesNotFoundError`: the job's own data).
_USAGE_TYPE = re.compile(
    r"(?i)(?:Config(?:uration)?|Misconfiguration|Validation|Usage|Argument|Option|Override|"
    r"Schema|Interpolation|Missing(?:Mandatory)?Value|Unsupported|Incompatible|Dataset|"
    r"DataFiles|Tokeniz\w*|Vocab)\w*"
    r"(?:Error|Exception)$"
)
# Python's own environment errors, about reaching or reading something outside the program
# (a file system, a peer, the network): raised by a library, they say nothing of the job's code.
_ENVIRONMENT_TYPE = re.compile(
    r"(?i)^(?:OSError|IOError|EOFError|BlockingIOError|ConnectionError|\w*Connection\w*Error|"
    r"TimeoutError|\w*Timeout\w*|BrokenPipeError|InterruptedError|SystemError|MemoryError|"
    r"\w*(?:Network|Socket|Store|Backend|Http|HTTP|SSL|Request)\w*(?:Error|Exception))$"
)
# PyTorch's re-raise of an error from another process or thread (torch/_utils.py
# ExceptionWrapper: `Caught KeyError in DataLoader worker process 0.`, `Caught RuntimeError in
# replica 0 on device 0.`): the error it wraps, printed below it, is the one to read.
REPORTS_ANOTHER = re.compile(r"\bCaught \w+ in (?:DataLoader worker process|replica) \d+")
# A message about the GPU, its driver or the fabric (`Error 803: system has unsupported display
# driver / cuda driver combination`, `CUDNN_STATUS_INTERNAL_ERROR`, an NCCL failure), or about
# reaching something outside the process: no verdict on the job's use of the library.
_DEVICE_OR_DRIVER = re.compile(
    r"(?i)\b(?:cuda\w*|cudnn\w*|cublas\w*|nccl\w*|nvml\w*|hip|rocm|driver|device|gpu|ecc|xid)\b|"
    r"\bError \d{3}\b|unknown error|"
    # (or about reaching something: a store, a peer, a file system)
    r"timed? ?out|timeout|connect|socket|network|unreachable|refused|reset by peer|"
    r"broken pipe|\[Errno \d+\]|errno"
)
GENERIC_APPLICATION_IDS = frozenset({"python_user_exception", "python_library_rejected_input"})
# An exception a library raised under the job's own call, not known to be about its input.
LIBRARY_CALL_FAILED = "python_library_call_failed"


@dataclass
class _Stack:
    """One actor's traceback so far."""

    open: bool = False
    innermost: str = ""
    innermost_func: str = ""
    job_frames: int = 0
    in_save: bool = False
    code_next: bool = False


@dataclass
class TracebackTracker:
    """Follows each actor's traceback, frame by frame, in one pass over the output."""

    stacks: dict[str | None, _Stack] = field(default_factory=dict)

    def feed(self, actor: str | None, body: str) -> bool:
        """Take one line; True when it is a frame (or a frame's source line) and nothing else
        should read it."""
        stack = self.stacks.get(actor)
        if stack is None:  # (not `setdefault`: no throw-away _Stack for every line)
            stack = self.stacks[actor] = _Stack()
        if "Traceback" in body and _TRACEBACK.search(body):
            # (A chained traceback, "During handling of the above exception", starts afresh:
            # its frames are the outer call.)
            self.stacks[actor] = _Stack(open=True)
            return False
        frame = _FRAME.match(body) if '", line ' in body else None  # (its literal first)
        if frame is None and stack.open:
            frame = _RICH_FRAME.match(body)
        if frame is not None:
            if not stack.open:  # (no header before it: a traceback quoted from its middle)
                stack = self.stacks[actor] = _Stack(open=True)
            path, func = frame.group("path"), frame.group("func") or ""
            if _SAVE_FUNC.search(func) or "/checkpoint" in path:
                stack.in_save = True
            stack.innermost, stack.innermost_func = path, func
            stack.job_frames += _users_code(path)
            stack.code_next = True
            return True
        if (stack.code_next and body[:1].isspace()) or (stack.open and body.startswith("│")):
            return True  # the source line a traceback frame shows is code, not an error message
        stack.code_next = False
        return False

    def in_traceback(self, actor: str | None) -> bool:
        return self.stacks.get(actor, _Stack()).open

    def in_save(self, actor: str | None) -> bool:
        stack = self.stacks.get(actor)
        return stack is not None and stack.open and stack.in_save

    def close(self, actor: str | None) -> None:
        """The exception line ended this actor's traceback."""
        if (stack := self.stacks.get(actor)) is not None:
            stack.open = False

    def unknown_exception(self, actor: str | None, body: str) -> PatternMatch:
        """The reading of an exception no registry entry knows that ends `actor`'s traceback."""
        stack = self.stacks.get(actor, _Stack())
        if _users_code(stack.innermost):
            return _generic_exception(body, "python_user_exception")
        name = m.group("name") if (m := _EXC_LINE.match(body)) else ""
        if stack.job_frames == 0 or _ENVIRONMENT_TYPE.match(name) or REPORTS_ANOTHER.search(body):
            return _generic_exception(body)
        if _USAGE_TYPE.match(name):
            return _generic_exception(body, "python_library_rejected_input")
        if _DEVICE_OR_DRIVER.search(body):
            # The node's GPU, driver or fabric may be why, even where a library's check says
            # so (`_check_driver`).
            return _generic_exception(body)
        if _VALIDATING_FUNC.search(stack.innermost_func):
            return _generic_exception(body, "python_library_rejected_input")
        # Raised in a library the job's own code called, of no environment type: most likely
        # how the job uses it (or the library versions it installed); weakly the job's.
        return _generic_exception(body, LIBRARY_CALL_FAILED)


def _users_code(path: str | None) -> bool:
    """The frame that raised is the job's own code, not an installed library or Python's."""
    return bool(path) and not _LIBRARY_PATH.search(path or "")


def _generic_exception(body: str, application_id: str | None = None) -> PatternMatch:
    """An exception no registry entry knows, ending a traceback: a weak root, the
    application's when `application_id` says why (the job's code raised it, or a library
    rejected the job's input), else of unknown cause."""
    return PatternMatch.model_construct(
        id=application_id or "python_exception",
        kind=AnomalyKind.CRASH,
        category=Category.APPLICATION if application_id else Category.UNKNOWN,
        role="root",
        severity="error",
        span=(0, len(body)),
        groups={},
        tags=(),
    )
