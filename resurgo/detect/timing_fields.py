"""Duration fields of a step line: which phases a line times, and for how long (in ms).

The spellings read, each from a real trainer or a common hand-written timer:
- `key=value` / `key: value` with a duration key (`step_time_s: 0.50`, `data_time=0.35`,
  `dt=554.0ms`, mmengine's `time: 0.5 data_time: 0.1`);
- DeepSpeed's wall_clock_breakdown `time (ms) | forward: 123.45 | backward: 234.56`;
- `|`-, `,`- or tab-separated cells whose value carries its unit (`| data 0.011s |`) and
  pytorch/examples' AverageMeter `Time  0.781 ( 0.70)`;
- space-separated phases whose values carry their unit (`step 0.530s data 0.016s
  allreduce_wait 0.013s`), two at least on the line;
- `key=value` with a unit, whatever the key (`data=0.902s total=1.215s`);
- `parse_step_duration`'s spellings of a step's own time, as `step`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from resurgo.detect.lines import MEMO_MAX_LINES, block_memo
from resurgo.detect.progress import parse_step_duration

_FLAGS = re.ASCII

_TIME_FIELD = re.compile(
    r"(?i)(?<![\w])\"?(?P<key>dt|time|t_[a-z][a-z0-9_]*|[a-z][a-z0-9_]*_?time(?:_(?:s|ms|sec))?|"
    r"time_[a-z0-9_]+|[a-z][a-z0-9]*_ms)\"?"
    r"\s*[=:]\s*(?P<value>\d{1,9}(?:\.\d{1,9})?)(?:\s*(?P<unit>ms|s)\b)?(?![\d:./_-])"
)
# `_TIME_FIELD` in two steps (the same matches, see `keyed_fields`): any ASCII token before
# `=`/`:` and a number, then whether the token is a duration key.
_TOKEN_FIELD = re.compile(
    r"(?i)(?<![\w])\"?(?P<key>[A-Za-z_][A-Za-z0-9_]*+)\"?"
    r"\s*[=:]\s*(?P<value>\d{1,9}(?:\.\d{1,9})?)(?:\s*(?P<unit>ms|s)\b)?(?![\d:./_-])"
)
_TIME_KEY = re.compile(
    r"(?i)dt|time|t_[a-z][a-z0-9_]*|[a-z][a-z0-9_]*_?time(?:_(?:s|ms|sec))?|time_[a-z0-9_]+"
    r"|[a-z][a-z0-9]*_ms"
)
# A field of a `|`-, `,`- or tab-separated step line whose value carries its unit:
# `| data 0.011s | fwd+bwd 0.98s | log_samples 0.44s |`, `| log+upload 2.17 s`, and
# pytorch/examples' AverageMeter `Time  0.781 ( 0.70)` / `Data  0.372 ( 0.30)` (seconds: the
# current value, then the running average in parentheses).
_SEPARATED_FIELD = re.compile(
    r"(?i)(?:[|,\t])\s{0,16}(?P<key>[a-z][a-z0-9_+/-]{0,30}?)\s{1,16}"
    r"(?P<value>\d{1,9}(?:\.\d{1,9})?)(?:\s?(?P<unit>ms|s)\b(?!/)|(?=\s+\(\s*\d+\.\d+\)))"
)
# The same meters with their tabs expanded to blanks (a logger's formatter, a terminal's copy):
# `[  10/5000]    lr: 0.000040    Time  2.828 ( 4.689)    Data  0.011 ( 1.300)`; only the two
# meters that are durations, by the names pytorch/examples gives them.
_SPACED_METER = re.compile(
    r"(?:^|\s{2})(?P<key>Time|Data)\s+(?P<value>\d{1,9}\.\d{1,9})\s+\(\s*\d{1,9}\.\d{1,9}\)", _FLAGS
)
# (`data_wait=   7ms`: a timer that pads its values to a column)
_UNIT_FIELD = re.compile(
    r"(?<![\w.+-])(?P<key>[A-Za-z][A-Za-z0-9_]{0,30})= {0,8}(?P<value>\d{1,9}(?:\.\d{1,9})?)"
    r"(?P<unit>ms|s)(?![\w/])",
    _FLAGS,
)
_MS_PHASE = re.compile(r"\|\s*([A-Za-z][\w.-]{0,60}):\s*(\d{1,9}(?:\.\d{1,9})?)(?![\d.])")
# Space-separated phases whose values carry their unit, one after the other, as a hand-written
# timer prints them: `it 100 step 0.530s data 0.016s allreduce_wait 0.013s`. Prose that holds
# durations (`saved in 12.3s`, `wait was 199.7ms vs median rank r0 at 10.4ms`) has words
# between them: only a run of two pairs or more with nothing else between is read.
_SPACED_PAIR = r"[A-Za-z][A-Za-z0-9_+]{0,30} \d{1,9}(?:\.\d{1,9})?(?:ms|s)"
_SPACED_RUN = re.compile(rf"(?<![\w.+=/-]){_SPACED_PAIR}(?:[ \t]+{_SPACED_PAIR})+(?![\w/])", _FLAGS)
_SPACED_FIELD = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z0-9_+]{0,30}) (?P<value>\d{1,9}(?:\.\d{1,9})?)(?P<unit>ms|s)",
    _FLAGS,
)
# A cheap test for such a line before any field regex runs: a unit-suffixed number followed by
# the next word (`0.530s data`).
SPACED_HINT = re.compile(r"\d(?:ms|s) [A-Za-z]", _FLAGS)
# A separated step line whose last cell carries its unit (`... | img/s 5231 | step 0.587s`): the
# literal gates look for a separator after the unit, which the line's end does not have.
SEPARATED_END = re.compile(r"\|\s*[A-Za-z][\w+/-]{0,30}\s+\d{1,9}(?:\.\d{1,9})?\s?m?s\s*$", _FLAGS)


def keyed_fields(text: str) -> dict[str, float]:
    """The `key=value` / `key: value` duration fields of a line, in ms (`_TIME_FIELD`'s
    matches: every \\w-token before `=`/`:` is a candidate, the key regex decides; one pass
    of a simple token regex costs a fraction of the key alternation tried at every position)."""
    out: dict[str, float] = {}
    # Every field is `key` then `=` or `:`: a line with neither has none.
    if "=" not in text and ":" not in text:
        return out
    for m in _TOKEN_FIELD.finditer(text):
        key, value, unit = m.groups()
        known = _TIME_KEYS.get(key)
        if known is None:
            known = _time_key(key)
        if not known:
            continue
        unit = (unit or "").lower() or ("ms" if known.endswith("ms") else "s")
        if (dur := _duration_ms(value, unit)) is not None:
            out.setdefault(known, dur)
    return out


_TIME_KEYS: dict[str, str] = {}
"""Token → its lower-cased key if `_TIME_KEY` takes it, else "": a job prints the same few
keys on every line, so each is tried once (bounded: a flood of distinct tokens is not kept)."""
_TIME_KEYS_MAX = 4096


def _time_key(token: str) -> str:
    known = token.lower() if _TIME_KEY.fullmatch(token) is not None else ""
    if len(_TIME_KEYS) < _TIME_KEYS_MAX:
        _TIME_KEYS[token] = known
    return known


def _duration_ms(value: str, unit: str) -> float | None:
    """A field's value in ms (`unit` is `ms` or seconds); None unless finite and not negative."""
    try:
        ms = float(value) * (1.0 if unit == "ms" else 1000.0)
    except ValueError:
        return None
    return ms if math.isfinite(ms) and ms >= 0 else None


def timing_fields(text: str) -> Mapping[str, float]:
    """Every duration field on a line, in ms: `step_time_s: 0.50`, `data_time_s=0.35`,
    `dt=554.0ms`, `fwd_bwd_time 12ms`, plus `parse_step_duration`'s spellings (as `step`).
    A value without a unit is in seconds unless its key ends in `_ms`. Computed once per
    distinct line inside a `memoised_prefixes` block (the event scan and the series reader
    both ask), so the result is read-only."""
    memo = block_memo("timing_fields")
    if memo is None:
        return _timing_fields(text)
    found: Mapping[str, float] | None = memo.get(text)
    if found is None:
        found = _timing_fields(text)
        if len(memo) < MEMO_MAX_LINES:
            memo[text] = found
    return found


def _timing_fields(text: str) -> dict[str, float]:
    out = keyed_fields(text)
    if "time (ms) |" in text:
        # DeepSpeed's wall_clock_breakdown (deepspeed/utils/timer.py SynchronizedWallClockTimer
        # .log): `time (ms) | forward: 123.45 | backward: 234.56 | step: 40.00`.
        for m in _MS_PHASE.finditer(text):
            ms = float(m.group(2))
            if math.isfinite(ms):
                out.setdefault(m.group(1).lower(), ms)
    if "|" in text or "\t" in text or "," in text:
        for m in _SEPARATED_FIELD.finditer(text):
            key = m.group("key").lower()
            unit = (m.group("unit") or "s").lower()
            if (dur := _duration_ms(m.group("value"), unit)) is not None:
                out.setdefault(key, dur)
    if not out and ("Time  " in text or "Data  " in text):
        for m in _SPACED_METER.finditer(text):
            if (dur := _duration_ms(m.group("value"), "s")) is not None:
                out.setdefault(m.group("key").lower(), dur)
    if not out and (spelled := parse_step_duration(text)) is not None:
        out["step"] = spelled
    if " " in text and SPACED_HINT.search(text) is not None:
        for run in _SPACED_RUN.finditer(text):
            for m in _SPACED_FIELD.finditer(run.group()):
                if (dur := _duration_ms(m.group("value"), m.group("unit"))) is not None:
                    out.setdefault(m.group("key").lower(), dur)
    if "=" in text:
        # A value that carries its unit is a duration whatever its key: a per-rank phase
        # line `timing step 5 data=0.902s total=1.215s` (after the spellings above, which
        # decide whether a line has a step time of its own).
        for m in _UNIT_FIELD.finditer(text):
            if (dur := _duration_ms(m.group("value"), m.group("unit").lower())) is not None:
                out.setdefault(m.group("key").lower(), dur)
    return out
