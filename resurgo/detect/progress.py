"""Training-progress recognition: which iteration a log line reports, and how long steps take.

Built-in formats (searched after any `srun -l` label and `[rankN]:` prefix):
- Megatron: ` iteration       12/     200 | elapsed time per iteration (ms): 85.3 | ...`
- PyTorch Lightning: `Epoch 2:  12%|█▏   | 120/1000 [00:30<03:40, ...]` → epoch * total + n
  (a global step that keeps growing across epochs; `n` alone when the total is unknown)
- tqdm bars (HF Trainer, plain loops): `  5%|▌    | 50/1000 [00:10<03:10, 5.00it/s]`,
  `50it [00:10, ...]`
- key/value and prose: `Step 50/1000`, `step 50`, `step=50`, `global_step=50`, `'step': 50`,
  `iter 50`, `Iteration: 50`.

HF Trainer's `{'loss': 0.5, 'learning_rate': ..., 'epoch': 0.1}` carries no step and is not
progress by itself. Lines about loading/resuming a checkpoint (`loaded checkpoint ... at
iteration 200`, `Resuming from step 200`) are not progress either: they say where the attempt
started, not that it advanced.

A job may bring its own `progress_pattern`: one capturing group, or a named group
`iteration`, holding the number. It replaces the built-in formats. A line it matches without a
parsable non-negative integer gives None; nothing here raises on any input line.

A job's pattern is written by any cluster user and runs on the controller's event loop, so it
is compiled with RE2 (`google-re2`): matching is linear in the line whatever the pattern, and
what RE2 cannot run in linear time (backreferences, lookaround) is refused when the directive
is read, with the reason, instead of freezing every watch on the controller.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple, Protocol

import re2

from resurgo.detect.lines import split_srun_label, strip_prefixes
from resurgo.detect.literals import gated

MAX_PATTERN_CHARS = 1000
MAX_CUSTOM_LINE_CHARS = 4096
"""A custom pattern only sees this much of a line (bounds the cost of a careless regex)."""
MAX_ITERATION = 10**15
# RE2's memory budget for one compiled pattern (its default is 8 MiB); a pattern needing more
# (huge counted repetitions) fails to compile and is reported as unusable.
PATTERN_MAX_MEM = 2 << 20

_FLAGS = re.ASCII

# Cheap gate: a line without any of these cannot be a built-in progress line.
_GATE = gated(
    re.compile(
        r"(?i)iter|step|%\||it \[|epoch|\bit[ =:]|\bitr\b|train: |num_updates|\[batch="
        r"|\]\s+(?:lr|time|loss|data|eta)\b"
    )
)
_RESUME = re.compile(
    r"(?i)\b(?:resum\w*|restor\w*|load(?:ed|ing)?\s+(?:the\s+)?(?:\w+\s+)?checkpoint"
    r"|checkpoint\s+loaded)\b"
)
_MEGATRON = re.compile(r"\biteration\s+(\d{1,15})\s*/\s*\d{1,15}\s*\|", _FLAGS)
_LIGHTNING = re.compile(
    r"\bEpoch (\d{1,9}):[^|]{0,16}\|[^|]{0,200}\|\s*(\d{1,15})/(\d{1,15}|\?)\s*\[", _FLAGS
)
# pytorch/examples imagenet/main.py ProgressMeter (copied by many vision trainers):
# `Epoch: [4][ 200/2502]\tTime  0.781 ( 0.70)\tData  0.372 ( 0.30)\tLoss ...`.
# timm train.py: `Train: 3 [ 100/1251 (  8%)]  Loss: ...  Time: 0.312s, ...`; Composer's
# console logger: `[epoch=1][batch=120/10000]: ...`; pytorch/examples mnist/main.py (and
# open_clip's train loop after it): `Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.30` (samples seen).
_EPOCH_BATCH = re.compile(
    r"(?:\bEpoch: \[(\d{1,9})\]\[|\bTrain: (\d{1,9}) \[|\[epoch=(\d{1,9})\]\[batch="
    r"|\bTrain Epoch: (\d{1,9}) \[)"
    r"\s*(\d{1,15})/(\d{1,15})\b",
    _FLAGS,
)
# A run that logs once per epoch and counts no step: `Epoch #2057  | Time: 23h 56m 41s | ... |
# Train loss: 0.00034544`, `epoch: 12, loss 0.31`; the epoch's result line is its clock. (An
# epoch announced, `Epoch 3/100` or `Starting epoch 1:`, has not run yet; `epochs=5000` is a
# setting; a line counting steps is read by its step above.)
_EPOCH_ONLY = re.compile(
    r"(?i)(?<![\w.])epoch\s*(?:#\s*|[=:]\s*)?(\d{1,9})(?:\s*/\s*\d{1,9})?(?:\s*[|,:\]]|\s+)"
    r"(?=.{0,200}?\b(?:train[_ ])?loss\b)",  # (the epoch's result, not its announcement)
    _FLAGS,
)
# The same ProgressMeter with no epoch prefix (an iteration-based trainer's logger line, as
# mmcv/OpenSelfSup-era loggers print it): `- INFO - [  10/5000]    lr: 0.000040    Time  2.828
# ( 4.689)    Data ...`; the bracketed counter, then its meters.
_BRACKET_COUNTER = re.compile(
    r"(?:^|\s)\[\s*(\d{1,15})/\d{1,15}\]\s+(?=(?:lr|Time|Loss|loss|Data|eta)\b)", _FLAGS
)
# nnU-Net opens each epoch on a line of its own (v1 `epoch:  3`, v2 `2024-04-30 14:12:08.401733:
# Epoch 318`, after its time stamp) and prints the losses on the lines after: the epoch before
# it is done.
_EPOCH_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?: )?(?:epoch:\s+|Epoch )(\d{1,9})\s*$",
    _FLAGS,
)
# Composer's console logger when the run's duration is in batches (composer/loggers/
# console_logger.py `_log_to_console`: `[batch=120/20000]:` opens the block of that batch's
# metrics, one `\t Train ...: value` line each).
_COMPOSER_BATCH = re.compile(r"^\s*\[batch=(\d{1,15})/\d{1,15}\]", _FLAGS)
_TQDM = re.compile(r"(?:^|\s)\d{1,3}%\|[^|]{0,200}\|\s*(\d{1,15})/(?:\d{1,15}|\?)\s*\[", _FLAGS)
_TQDM_UNKNOWN_TOTAL = re.compile(r"(?:^|\s)(\d{1,15})it \[\d", _FLAGS)
# (ms-swift logs `'global_step/max_steps': '295/4491'`; Hand4Whole-style timers `itr
# 245/3861`; fairchem/OCP print every field in `%.4e`, the step too: `step: 1.4000e+03`.)
_KEYED = re.compile(
    r"(?i)(?<![\w.])(?:global[_ ]step(?:/max_steps)?|num_updates|step|iter(?:ation)?|itr)\b['\"]?"
    r"\s{0,16}[=:]?\s{0,16}['\"]?(?:(\d{1,15})\b(?![.]\d)|(\d\.\d{1,12}e\+\d{1,2})\b)",
    _FLAGS,
)
_SCIENTIFIC = re.compile(r"\d\.\d{1,12}[eE]\+\d{1,2}", _FLAGS)

# `it 7425 | loss 2.22`, `it: 120, loss ...`: the short key, only where a field separator follows
# (prose such as "did it 3 times" stays out); `it=100 loss=2.18`: key=value fields. A space,
# `=` or `:` after `it`, as the gate's `\bit[ =:]` has it (`s/it12|` is no step: hypothesis).
_SHORT_IT = re.compile(
    r"(?i)(?<![\w.])it[ =:]\s{0,16}[=:]?\s{0,16}(\d{1,15})\s{0,16}(?:\||,|/\s{0,16}\d)"
    r"|(?<![\w.])it=(\d{1,15}) +(?=[A-Za-z_]\w{0,40}=)",
    _FLAGS,
)

_STEP_TIME = re.compile(
    r"elapsed time per iteration \(ms\):\s*(\d{1,12}(?:\.\d{1,12})?)"
    r"|\b(?:step|iter(?:ation)?)_time_ms\s*[=:]\s*(\d{1,12}(?:\.\d{1,12})?(?:[eE][-+]?\d{1,3})?)\b",
    _FLAGS,
)
_STEP_DURATION = re.compile(
    r"(?i)\b(?:(?:step|iter(?:ation)?|batch|it)[_ ]?time|time[_ ]?(?:/|per[_ ])[_ ]?"
    r"(?:step|iter(?:ation)?|batch)|elapsed time per iteration)"
    r"(?:[_ ]?\(?(?P<key_unit>ms|s)\)?)?\s{0,16}[=:]?\s{0,16}(?P<value>\d{1,9}(?:\.\d{1,9})?)"
    r"\s{0,16}(?P<unit>ms|s)?\b"
)
_PER_IT = re.compile(
    r"(?i)(?<![\w.])(?P<value>\d{1,9}(?:\.\d{1,9})?)\s*(?P<unit>ms|s)/(?:it|iter|step)\b"
    r"(?P<key_unit>)"
)
_KEY_VALUE = re.compile(r"\b([A-Za-z_]\w{0,40})=([^\s,;|]{1,256})", _FLAGS)
_NODE = re.compile(r"[A-Za-z0-9][\w.-]{0,252}", _FLAGS)
_RANK_PREFIX = re.compile(r"\s*\[[Rr]ank ?(\d{1,7})\]", _FLAGS)


class RankTiming(NamedTuple):
    """One rank's timing for one step, as printed by per-rank timing lines."""

    rank: int
    node: str
    step: int
    ms: float


def _to_iteration(text: str | None) -> int | None:
    if text is None:
        return None
    if len(text) < 16 and text.isdigit() and text.isascii():
        return int(text)  # the common case: plain digits, below MAX_ITERATION
    cleaned = text.strip().replace(",", "").replace("_", "")
    if _SCIENTIFIC.fullmatch(cleaned) is not None:
        number = float(cleaned)  # (a whole number written `1.4000e+03`; not `1.4567e+03`)
        whole = int(number)
        return whole if whole == number and whole <= MAX_ITERATION else None
    if not cleaned or len(cleaned) > 16 or not (cleaned.isascii() and cleaned.isdigit()):
        return None
    value = int(cleaned)
    return value if value <= MAX_ITERATION else None


class UserMatch(Protocol):
    def group(self, group: int | str, /) -> str | None: ...


class UserRegex(Protocol):
    """The part of a compiled RE2 pattern used here (google-re2 ships no type hints)."""

    groups: int
    groupindex: dict[str, int]

    def search(self, text: str, /) -> UserMatch | None: ...


class CustomPattern(NamedTuple):
    """A job's validated `progress_pattern`: the RE2 regex and the group holding the number."""

    regex: UserRegex
    group: int | str


def _re2_options() -> object:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.max_mem = PATTERN_MAX_MEM
    return options


def compile_progress_pattern(pattern: object) -> CustomPattern:
    """Validate a job's `progress_pattern` and compile it with RE2 (linear-time matching).

    Raises ValueError with a message fit for the job owner when the pattern is unusable: not a
    non-empty string, longer than MAX_PATTERN_CHARS, not RE2 syntax, or not exactly one
    capturing group (or a named group `iteration`) around the number.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError("progress_pattern must be a non-empty regular expression")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"progress_pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        regex: UserRegex = re2.compile(pattern, _re2_options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(
            f"progress_pattern is not a valid regular expression for RE2 (no backreferences "
            f"or lookaround): {text[:200]}"
        ) from None
    except (UnicodeError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"progress_pattern is not a valid regular expression: {exc}") from None
    if "iteration" in regex.groupindex:
        return CustomPattern(regex, "iteration")
    if regex.groups == 0:
        raise ValueError(
            "progress_pattern needs one capturing group (or a named group "
            "'(?P<iteration>...)') around the iteration number"
        )
    if regex.groups > 1:
        raise ValueError(
            f"progress_pattern has {regex.groups} capturing groups; use exactly one, or name "
            "the one holding the iteration number '(?P<iteration>...)'"
        )
    return CustomPattern(regex, 1)


class ProgressParser:
    """Recognises the iteration number in training-progress lines."""

    def __init__(self, custom_pattern: str | CustomPattern | None = None) -> None:
        """`custom_pattern`: a job's pattern, as text (validated here) or already validated."""
        self._custom: CustomPattern | None = None
        if isinstance(custom_pattern, CustomPattern):
            self._custom = custom_pattern
        elif custom_pattern is not None:
            self._custom = compile_progress_pattern(custom_pattern)

    def parse(self, line: str, body: str | None = None) -> int | None:
        """The iteration/step this line reports, or None (never raises).

        `body`: `strip_prefixes(line).body` when the caller has it already (saves peeling the
        prefixes a second time; the result is the same)."""
        try:
            if self._custom is not None:
                return _parse_custom(line, self._custom)
            return _parse_builtin(line, body)
        except (RecursionError, OverflowError, ValueError, IndexError, TypeError):
            return None


def _last(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last match (a tqdm line rewritten with carriage returns holds several bars)."""
    matches = list(regex.finditer(text))
    return matches[-1] if matches else None


def _parse_custom(line: str, custom: CustomPattern) -> int | None:
    regex, group = custom
    text = line[:MAX_CUSTOM_LINE_CHARS]
    m = regex.search(text)
    if m is None:
        body = strip_prefixes(text).body
        if body is text:
            return None
        m = regex.search(body)
        if m is None:
            return None
    return _to_iteration(m.group(group))


def _parse_builtin(line: str, body: str | None = None) -> int | None:
    # The gate's literals only (not its regex): every format below needs one of its
    # alternatives with the same word boundaries, so the regex would decide nothing more.
    if not _GATE.may_match(line):
        return None
    if not line.isascii() and _GATE.pattern.search(line) is None:
        # (Unicode case folding maps a few other characters onto ASCII letters, the long s
        # U+017F onto `s`: the literals cannot stand in for the regex on such text)
        return None
    text = strip_prefixes(line).body if body is None else body
    # Literal gates: each regex below needs the literal tested before it, so a line without
    # it skips the regex (most progress lines hold one format's literals, not all five). The
    # gates on lower-cased text are exact for ASCII text only (Unicode case folding maps a
    # few other characters onto ASCII letters), so other text runs every regex.
    low = text.lower() if text.isascii() else None
    if (low is None or "resum" in low or "restor" in low or "checkpoint" in low) and (
        _RESUME.search(text) is not None
    ):
        return None
    if "iteration" in text and (m := _MEGATRON.search(text)) is not None:
        return _to_iteration(m.group(1))
    last = _last(_LIGHTNING, text) if "Epoch " in text else None
    if last is not None:
        epoch, n, total = _to_iteration(last.group(1)), _to_iteration(last.group(2)), last.group(3)
        if epoch is None or n is None:
            return None
        size = _to_iteration(total)
        total_steps = n if size is None else epoch * size + n
        return total_steps if total_steps <= MAX_ITERATION else None
    if ("Epoch: " in text or "Train: " in text or "[epoch=" in text) and (
        m := _EPOCH_BATCH.search(text)
    ) is not None:
        epoch = _to_iteration(m.group(1) or m.group(2) or m.group(3) or m.group(4))
        n, size = _to_iteration(m.group(5)), _to_iteration(m.group(6))
        if epoch is None or n is None or size is None:
            return None
        return epoch * size + n if epoch * size + n <= MAX_ITERATION else None
    if "[batch=" in text and (m := _COMPOSER_BATCH.match(text)) is not None:
        return _to_iteration(m.group(1))
    last = _last(_TQDM, text) if "%|" in text else None
    if last is not None:
        return _to_iteration(last.group(1))
    last = _last(_TQDM_UNKNOWN_TOTAL, text) if "it [" in text else None
    if last is not None:
        return _to_iteration(last.group(1))
    # Both are ASCII-only case-insensitive, so `str.lower` keeps their literals in any text.
    folded = text.lower() if low is None else low
    m = None
    if "step" in folded or "iter" in folded or "itr" in folded or "num_updates" in folded:
        m = _KEYED.search(text)
    if m is None and "it" in folded:
        m = _SHORT_IT.search(text)
    if m is not None:
        return _to_iteration(m.group(1) or m.group(2))
    if "epoch" in folded and (m := _EPOCH_ONLY.search(text)) is not None:
        return _to_iteration(m.group(1))
    if "poch" in text and len(text) < 60 and (m := _EPOCH_LINE.match(text)) is not None:
        return _to_iteration(m.group(1))
    if "/" in text and "] " in text and (m := _BRACKET_COUNTER.search(text)) is not None:
        return _to_iteration(m.group(1))
    return None


def parse_step_time(line: str) -> float | None:
    """Milliseconds per step from `elapsed time per iteration (ms): X` or `step_time_ms=X`."""
    m = _STEP_TIME.search(line)
    if m is None:
        return None
    try:
        value = float(m.group(1) or m.group(2))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_step_duration(text: str) -> float | None:
    """Milliseconds one step took, in the common spellings: `step_time 1.84s`,
    `iter_time=512.3ms`, `time/iter: 0.52`, `time per step (ms): 85`, `4.88s/it`,
    Megatron's `elapsed time per iteration (ms): 337.8`. A bare number is seconds, except
    where the key says ms."""
    # Literal gates (exact on ASCII text; see `_parse_builtin`): every spelling of
    # `_STEP_DURATION` holds "time", every one of `_PER_IT` "s/".
    low = text.lower() if text.isascii() else None
    m = None
    if low is None or "time" in low:
        m = _STEP_DURATION.search(text)
    if m is None and (low is None or "s/" in low):
        m = _PER_IT.search(text)
    if m is None:
        return None
    unit = (m.group("unit") or m.group("key_unit") or "").lower()
    try:
        value = float(m.group("value"))
    except ValueError:
        return None
    ms = value if unit == "ms" else value * 1000.0
    return ms if math.isfinite(ms) and ms >= 0 else None


def parse_rank_timing(line: str) -> RankTiming | None:
    """`[rank<r>] step=<i> step_time_ms=<t> node=<node>` (keys in any order) → RankTiming.

    The rank comes from the `[rankN]` prefix or a `rank=N` key; `step`, `step_time_ms` and
    `node` are required.
    """
    if "step_time_ms=" not in line:
        return None
    _, text = split_srun_label(line)
    rank: int | None = None
    prefix = _RANK_PREFIX.match(text)
    if prefix is not None:
        rank = int(prefix.group(1))
    values: dict[str, str] = {}
    for key, value in _KEY_VALUE.findall(text):
        values.setdefault(key, value)
    if rank is None:
        rank = _to_iteration(values.get("rank"))
    step = _to_iteration(values.get("step"))
    node = values.get("node")
    raw_ms = values.get("step_time_ms")
    if rank is None or step is None or node is None or raw_ms is None:
        return None
    if _NODE.fullmatch(node) is None:
        return None
    try:
        ms = float(raw_ms)
    except ValueError:
        return None
    if not math.isfinite(ms) or ms < 0:
        return None
    return RankTiming(rank=rank, node=node, step=step, ms=ms)
