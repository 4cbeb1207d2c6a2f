#!/usr/bin/env python3
"""Attribution accuracy on a labelled corpus (default `tests/corpus`).

    .venv/bin/python bench/attribution_accuracy.py [CORPUS_DIR] [--json] [--show-failures]
    .venv/bin/python bench/attribution_accuracy.py --per-set DIR [DIR ...]

With `--per-set`, each directory is scored on its own and printed as one row of a table (kind,
category, culprit F1, action, false stops, false exclusions), plus the pooled total; the exit
code says whether every set met the targets.

Every bundle goes through the `resurgo attribute --json` code path (`analyse_bundle`) and is
compared with its `expected.json`. Prints per-category precision/recall, culprit-node
precision/recall/F1, kind and action accuracy, false-stop and false-exclusion rates, and exits
1 when a target is missed (category accuracy >= 0.95, culprit-node F1 >= 0.95, action accuracy
>= 0.95, zero false stops), 2 when the corpus cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from resurgo.attribute.accuracy import Score, corpus_dirs, score  # noqa: E402
from resurgo.attribute.offline import BundleError, analyse_bundle  # noqa: E402


def attribute(bundle: Path) -> dict[str, Any]:
    try:
        return analyse_bundle(bundle).as_json()
    except BundleError as exc:
        return {"kind": "error", "category": "error", "culprit_nodes": [], "action": str(exc)}


def render(result: Score, console: Console, *, seconds: float, show_failures: bool) -> None:
    cases = result.cases
    origins: dict[str, int] = {}
    for c in cases:
        origin = str(c.expected.get("origin", "?"))
        origins[origin] = origins.get(origin, 0) + 1
    mix = ", ".join(f"{n} {o}" for o, n in sorted(origins.items()))
    console.print(f"{len(cases)} bundles ({mix}) in {seconds:.1f}s")

    per_cat = Table("category", "bundles", "precision", "recall", title="per category")
    for name, (precision, recall) in result.categories().items():
        per_cat.add_row(name, str(recall.den), str(precision), str(recall))
    console.print(per_cat)

    summary = Table("metric", "value", "target", title="overall")
    ok = "[green]ok[/green]"
    miss = "[red]MISSED[/red]"
    cat = result.category_accuracy
    act = result.action_accuracy
    stops = result.false_stops
    summary.add_row("category accuracy", str(cat), f">= 0.95 {ok if cat.value >= 0.95 else miss}")
    summary.add_row("kind accuracy", str(result.kind_accuracy), "")
    summary.add_row("culprit-node precision", str(result.culprit_precision), "")
    summary.add_row("culprit-node recall", str(result.culprit_recall), "")
    f1 = result.culprit_f1
    summary.add_row("culprit-node F1", f"{f1:.3f}", f">= 0.95 {ok if f1 >= 0.95 else miss}")
    summary.add_row("action accuracy", str(act), f">= 0.95 {ok if act.value >= 0.95 else miss}")
    summary.add_row(
        "false-stop rate", str(stops), f"0 false stops {ok if stops.num == 0 else miss}"
    )
    summary.add_row("false-exclusion rate", str(result.false_exclusions), "")
    summary.add_row("all four fields right", str(result.exact), "")
    console.print(summary)

    wrong = [c for c in cases if not c.ok()]
    if wrong and show_failures:
        table = Table("bundle", "expected", "got", title="mismatches")
        for c in wrong:
            e, g = c.expected, c.got
            table.add_row(
                c.name,
                f"{e['kind']} {e['category']} {sorted(c.expected_nodes)} {e['action']}",
                f"{g['kind']} {g['category']} {sorted(c.got_nodes)} {g['action']}",
            )
        console.print(table)
    elif wrong:
        console.print(f"{len(wrong)} mismatch(es); --show-failures lists them")


def per_set(dirs: list[Path], console: Console) -> int:
    table = Table(
        "set", "bundles", "kind", "category", "culprit F1", "action", "false stops",
        "false exclusions", title="attribution per set (targets: 0.95, 0.95, 0.95, 0 stops)",
    )  # fmt: skip
    all_bundles: list[Path] = []
    missed = False
    for d in dirs:
        bundles = corpus_dirs(d)
        if not bundles:
            console.print(f"[red]no labelled bundles (expected.json) under {d}[/red]")
            return 2
        all_bundles.extend(bundles)
        r = score(bundles, attribute)
        missed = missed or bool(r.failures())
        name = f"{d.parent.name}/{d.name}" if d.name == "cases" else d.name
        table.add_row(
            name, str(len(bundles)), f"{r.kind_accuracy.value:.3f}",
            f"{r.category_accuracy.value:.3f}", f"{r.culprit_f1:.3f}",
            f"{r.action_accuracy.value:.3f}", str(r.false_stops.num),
            f"{r.false_exclusions.value:.3f}",
        )  # fmt: skip
    r = score(all_bundles, attribute)
    table.add_row(
        "all", str(len(all_bundles)), f"{r.kind_accuracy.value:.3f}",
        f"{r.category_accuracy.value:.3f}", f"{r.culprit_f1:.3f}",
        f"{r.action_accuracy.value:.3f}", str(r.false_stops.num), f"{r.false_exclusions.value:.3f}",
    )  # fmt: skip
    Console(width=max(console.width, 120)).print(table)
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("corpus", nargs="?", type=Path, default=REPO / "tests" / "corpus")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("--show-failures", action="store_true", help="list the mismatching bundles")
    p.add_argument("--per-set", nargs="+", type=Path, metavar="DIR", help="one row per corpus")
    args = p.parse_args(argv)
    console = Console()
    if args.per_set:
        return per_set(args.per_set, console)
    try:
        bundles = corpus_dirs(args.corpus)
    except OSError as exc:
        console.print(f"[red]cannot read corpus {args.corpus}: {exc}[/red]")
        return 2
    if not bundles:
        console.print(f"[red]no labelled bundles (expected.json) under {args.corpus}[/red]")
        return 2
    start = time.perf_counter()
    result = score(bundles, attribute)
    seconds = time.perf_counter() - start
    missed = result.failures()
    if args.json:
        print(json.dumps({
            "bundles": len(result.cases),
            "category_accuracy": result.category_accuracy.value,
            "kind_accuracy": result.kind_accuracy.value,
            "culprit_precision": result.culprit_precision.value,
            "culprit_recall": result.culprit_recall.value,
            "culprit_f1": result.culprit_f1,
            "action_accuracy": result.action_accuracy.value,
            "false_stops": result.false_stops.num,
            "false_exclusion_rate": result.false_exclusions.value,
            "per_category": {
                k: {"precision": p.value, "recall": r.value}
                for k, (p, r) in result.categories().items()
            },
            "mismatches": [c.name for c in result.cases if not c.ok()],
            "targets_missed": missed,
        }))  # fmt: skip
    else:
        render(result, console, seconds=seconds, show_failures=args.show_failures)
        for line in missed:
            console.print(f"[red]target missed:[/red] {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
