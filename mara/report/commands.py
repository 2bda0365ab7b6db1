"""The sections of ``python -m mara.report``: each reads run folders (or their results.json; several runs on the
same episodes comma-separated) and prints one table, made by the section's own module.

A missing folder, a file that is not a run's results, or a run of another kind (a trace run where a paper-protocol
evaluation is read) is refused in one line, exit 2, before any table.
"""

from __future__ import annotations

import json
from pathlib import Path

from mara.report.compare import compare_rows
from mara.report.paired import by_task_set, paired_table
from mara.report.paired_runs import paired_runs_table, per_episode
from mara.report.ratio import ratio_table
from mara.report.runs import TRACE_FIELDS, load_results, load_rows
from mara.report.suite import SETTINGS, folder, setting_table, suite_means
from mara.report.suite_figure import suite_figure
from mara.report.target_loss_breakdown import breakdown
from mara.report.target_loss_windows import windows_table
from mara.report.trace_table import trace_mara_table


class UsageError(ValueError):
    """The arguments do not fit the section's usage line."""


def _paired(args: list[str]) -> int:
    if len(args) < 2:
        raise UsageError
    print(paired_table(load_rows(args[0]), args[1], args[2:]))
    return 0


def _by_task_set(args: list[str]) -> int:
    if len(args) < 3:
        raise UsageError
    print(by_task_set(load_rows(args[0], ("method", "load", "success_rate", "task_set")), args[1], args[2:]))
    return 0


def _paired_runs(args: list[str]) -> int:
    if not args or any("=" not in a or ":" not in a.split("=", 1)[1] for a in args):
        raise UsageError
    series = []
    for a in args:
        label, spec = a.split("=", 1)
        run, method = spec.rsplit(":", 1)
        method, _, seed = method.partition("@")
        if seed and not seed.isdigit():
            raise ValueError(f"{a}: the training seed after @ must be an integer")
        s = per_episode(load_rows(run), method, int(seed) if seed else None)
        if not s:
            raise ValueError(f"no rows of {method}{'@' + seed if seed else ''} in {run}")
        series.append((label, s))
    print(paired_runs_table(series))
    return 0


def _ratio(args: list[str]) -> int:
    if len(args) < 4:
        raise UsageError
    try:
        target = float(args[2])
    except ValueError:
        raise ValueError(f"TARGET must be a number, got {args[2]!r}") from None
    print(ratio_table(load_rows(args[0]), args[1], target, args[3:]))
    return 0


def _compare(args: list[str]) -> int:
    if len(args) != 2:
        raise UsageError
    text, differing = compare_rows(*(load_results(p)["rows"] for p in args))
    print(text)
    return 1 if differing else 0


def _trace_table(args: list[str]) -> int:
    if not args:
        raise UsageError
    runs: dict = {}  # trace -> rows of every folder that replayed it
    for a in args:
        folder, _, label = a.partition("=")  # folder=Label: its MARA rows are another scheduler's
        res = load_results(folder, TRACE_FIELDS + ("size_class",))
        if "trace" not in res.get("protocol", {}):
            raise ValueError(f"{folder}: not a trace run (its protocol names no trace)")
        rows = [dict(r, method=label) if label and r["method"] == "MARA" else r for r in res["rows"]]
        runs.setdefault(Path(res["protocol"]["trace"]).stem.replace("cluster", ""), []).extend(rows)
    print(trace_mara_table(runs))
    return 0


def _windows(args: list[str]) -> int:
    if len(args) != 4:
        raise UsageError
    out = Path(args[0])
    if not out.is_dir():
        raise FileNotFoundError(f"{out} is not a folder of target-loss window runs")
    try:
        chunks = [int(k) for k in args[2].split(",")]
    except ValueError:
        raise ValueError(f"WINDOWS must be comma-separated integers, got {args[2]!r}") from None
    print(windows_table(out, args[1].split(","), chunks, args[3].split(",")))
    return 0


def _breakdown(args: list[str]) -> int:
    if not args or len(args) % 2:
        raise UsageError
    pairs = list(zip(args[::2], args[1::2]))
    for run, csv in pairs:  # every input checked before the first (slow) breakdown
        load_results(run, TRACE_FIELDS)
        if not Path(csv).is_file():
            raise FileNotFoundError(f"trace file not found: {csv}")
    for run, csv in pairs:
        print(breakdown(run, load_results(run, TRACE_FIELDS), csv))
    return 0


def _suite(args: list[str]) -> int:
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] not in SETTINGS):
        raise UsageError
    out, settings = Path(args[0]), SETTINGS[args[1] if len(args) == 2 else "clusters"]
    runs = {name: out / folder(name) for name in settings}
    for d in runs.values():  # every setting's run checked before the first table
        load_results(d)
    summary = {}
    for name, d in runs.items():
        rows = load_results(d)["rows"]
        if (d / "size_policy").is_dir():  # the size's own policy, evaluated as MARA-suite in its own folder
            rows += [{**r, "method": "MARA-size"} for r in load_results(d / "size_policy")["rows"]]
        text, summary[name] = setting_table(name, rows)
        print(text)
    print(suite_means(summary))
    (out / "suite_summary.json").write_text(json.dumps(summary, indent=1))
    fig = suite_figure(summary, out / "suite_learned_vs_best.png")
    if fig:
        print(f"\nfigure: {fig}")
    return 0


#: section -> (its arguments, what it prints, handler)
SECTIONS = {
    "paired": ("RUNS BASE [METHOD ...]", "mean success per load and METHOD − BASE (paired)", _paired),
    "paired-by-task-set": ("RUNS BASE METHOD [METHOD ...]", "METHOD − BASE per task set and load", _by_task_set),
    "paired-runs": (
        "LABEL=RUN:METHOD[@SEED] ...",
        "each run's method against the first one, per load and over all loads",
        _paired_runs,
    ),
    "ratio": (
        "RUNS BOUND TARGET METHOD [METHOD ...]",
        "mean(METHOD) / mean(BOUND) and METHOD − TARGET × BOUND",
        _ratio,
    ),
    "compare": ("BEFORE AFTER", "rows differing per method between two runs (exit 1 if any)", _compare),
    "trace-table": (
        "RUN[=EDF-rule] ...",
        "MARA against the trace baselines per cluster, and per job-size class",
        _trace_table,
    ),
    "suite": (
        "OUT [clusters|sizes]",
        "one MARA across the suite's settings: learned − best rule per setting, the suite means and its figure",
        _suite,
    ),
    "target-loss-windows": (
        "OUT CLUSTER,... WINDOW,... METHOD,...",
        "deadline-met ratio over windows of target-loss runs per cluster",
        _windows,
    ),
    "target-loss-breakdown": (
        "RUN TRACE_CSV [RUN TRACE_CSV ...]",
        "why ElasticFlow on declared counts misses (target-loss runs)",
        _breakdown,
    ),
}


def usage(name: str) -> str:
    return f"usage: python -m mara.report {name} {SECTIONS[name][0]}"


def help_text() -> str:
    """Every section's usage line and what it prints."""
    return "\n".join(f"{usage(n)}\n    {what}" for n, (_, what, _) in SECTIONS.items())


def run_section(name: str, args: list[str]) -> int:
    """Run section ``name`` on ``args``: its exit status (UsageError, ValueError, FileNotFoundError raised)."""
    if args[:1] in (["-h"], ["--help"]):
        print(f"{usage(name)}\n    {SECTIONS[name][1]}")
        return 0
    return SECTIONS[name][2](args)
