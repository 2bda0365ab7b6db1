"""Results files: ``results.json`` (schema mara.results/1), ``results.md``, figures, TensorBoard scalars."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mara.core import registry
from mara.core.files import write_text_atomic
from mara.eval.metrics import summarize, summarize_diagnostics
from mara.report.decomposition import decomposition_markdown, gap_decomposition
from mara.report.styles import method_style

SCHEMA = "mara.results/1"


def method_order() -> list[str]:
    """The methods tables list first, in order (each method's ``report.order``, mara/core/registry.py)."""
    return registry.report_order()


def _fmt(cell) -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    return f"{cell['mean']:.2f} ± {cell['std']:.2f}"


def ordered_methods(methods) -> list[str]:
    """``methods`` in the report's order (:func:`method_order`), the ones it does not list sorted after."""
    order = method_order()
    return [m for m in order if m in methods] + sorted(m for m in methods if m not in order)


def build_results(rows: list[dict], extra: dict | None = None) -> dict:
    """The results dict: rows, success-rate summary, diagnostics (and any extra sections)."""
    res = {"schema": SCHEMA, "rows": rows, "summary": summarize(rows), "diagnostics": summarize_diagnostics(rows)}
    dec = gap_decomposition(rows)
    if dec:
        res["decomposition"] = dec  # allocation / prediction gap, share of the WLS → truth gap, learned − best rule
    res.update(extra or {})
    return res


def _task_sets(summary: dict, methods: list[str]) -> list[str]:
    """The task sets of a summary in first-seen order, "Average" last."""
    task_sets = []
    for m in methods:
        for ts in summary[m]:
            if ts not in task_sets and ts != "Average":
                task_sets.append(ts)
    if any("Average" in summary[m] for m in methods):
        task_sets.append("Average")
    return task_sets


def _by_load_table(title: str, table: dict, methods: list[str], loads: list[str]) -> list[str]:
    """A table of each method's "Average" cell (else its first task set's) at every load."""
    lines = [title, "", "| Method | " + " | ".join(f"p={ld}" for ld in loads) + " |", "|---" * (len(loads) + 1) + "|"]
    for m in methods:
        key = "Average" if "Average" in table[m] else next(iter(table[m]))
        lines.append(f"| {m} | " + " | ".join(_fmt(table[m][key].get(ld)) for ld in loads) + " |")
    return lines + [""]


def _diagnostics_md(diag: dict, methods: list[str]) -> list[str]:
    diag_methods = [m for m in methods if diag.get(m, {}).get("utilization", {}).get("mean") is not None]
    if not diag_methods:
        return []
    lines = [
        "## Operational diagnostics (all loads and task sets)",
        "",
        "| Method | Util. (%) | Queue full (%) | Waiting | Ready |",
        "|---|---|---|---|---|",
    ]
    for m in diag_methods:
        d = diag[m]
        lines.append(
            f"| {m} | {_fmt(d['utilization'])} | {_fmt(d['queue_full'])} | {_fmt(d['waiting'])} | {_fmt(d['ready'])} |"
        )
    return lines + [""]


def _clairvoyant_line(c: dict) -> str:
    """What the Clairvoyant bound models and how many of its episodes were solved to proven optimality."""
    return (
        (
            "Clairvoyant models the admission limit K exactly; "
            if c.get("admission_limit", True)
            else "Clairvoyant relaxes the admission limit K (a looser upper bound); "
        )
        + (f"here it is a {c['bound_kind']}; " if str(c.get("bound_kind", "exact")).startswith("bound") else "")
        + f"upper bounds are reported; "
        f"{c['n_optimal']}/{c['n_episodes']} episodes solved to proven optimality, "
        f"total solve time {c['solve_time_s']:.1f} s (max {c['max_solve_time_s']:.2f} s per episode)."
    )


def _notes_md(res: dict) -> list[str]:
    lines = []
    if res.get("timings"):
        lines += ["## Wall time (s)", "", "| Method | seconds |", "|---|---|"]
        lines += [f"| {m} | {t:.2f} |" for m, t in res["timings"].items()]
        lines.append("")
    if res.get("clairvoyant"):
        lines += [_clairvoyant_line(res["clairvoyant"]), ""]
    for status in ("skipped", "failed"):
        for m, reason in (res.get(status) or {}).items():
            lines += [f"**{m} {status}:** {reason}", ""]
    if res.get("prediction_markdown"):
        lines += [res["prediction_markdown"], ""]
    return lines


def results_markdown(res: dict, title: str = "Evaluation") -> str:
    """Tables like the paper's: per load, task sets × methods (mean ± sample std of success rate, %)."""
    summary = res["summary"]
    methods = ordered_methods(summary.keys())
    loads = sorted({ld for m in summary.values() for ts in m.values() for ld in ts}, key=float)
    lines = [f"# {title}", ""]
    for load in loads:
        lines += [
            f"## Success rate (%) at p = {load}",
            "",
            "| Task set | " + " | ".join(methods) + " |",
            "|---" * (len(methods) + 1) + "|",
        ]
        for ts in _task_sets(summary, methods):
            lines.append(f"| {ts} | " + " | ".join(_fmt(summary[m].get(ts, {}).get(load)) for m in methods) + " |")
        lines.append("")
    if len(loads) > 1:
        lines += _by_load_table("## Average success rate (%) by load", summary, methods, loads)
    lines += decomposition_markdown(res.get("decomposition") or gap_decomposition(res.get("rows") or []), methods)
    counts = summarize(res.get("rows") or [], key="n_tasks", scale=1.0)
    if counts and loads:
        counted = "## Tasks per episode (counted; equal weight to the task sets)"
        lines += _by_load_table(counted, counts, [m for m in methods if m in counts], loads)
    lines += _diagnostics_md(res.get("diagnostics") or {}, methods)
    return "\n".join(lines + _notes_md(res))


def plot_load_curve(res: dict, path: Path) -> Path | None:
    """Figure 4: average success rate vs load per method, ±1 sample std band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = res["summary"]
    loads = sorted({float(ld) for m in summary.values() for ts in m.values() for ld in ts})
    if len(loads) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7.4, 3.8))
    for m in ordered_methods(summary.keys()):
        key = "Average" if "Average" in summary[m] else next(iter(summary[m]))
        cells = [summary[m][key].get(f"{ld:g}") for ld in loads]
        xs = [ld for ld, c in zip(loads, cells) if c and c["mean"] is not None]
        mu = np.array([c["mean"] for c in cells if c and c["mean"] is not None])
        sd = np.array([c["std"] for c in cells if c and c["mean"] is not None])
        style = method_style(m)
        ax.plot(xs, mu, label=m, **style)
        ax.fill_between(xs, mu - sd, mu + sd, alpha=0.12, color=style["color"], linewidth=0)
    ax.set_xlabel("arrival probability p")
    ax.set_ylabel("success rate (%)")
    ax.set_title("Load generalisation (mean ± 1 sd over roots)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # outside: no line hidden
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def log_tensorboard(res: dict, out_dir: Path) -> None:
    """Summary success rates as TensorBoard scalars (x axis: load in percent)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard missing: results files still written
        return
    with SummaryWriter(log_dir=str(out_dir / "tb")) as w:
        for m, per_ts in res["summary"].items():
            for ts, per_load in per_ts.items():
                for ld, cell in per_load.items():
                    if cell["mean"] is not None:
                        w.add_scalar(
                            f"eval/success_rate/{ts}/{m}", cell["mean"], global_step=int(round(float(ld) * 100))
                        )


def write_results(
    res: dict, out_dir: Path, title: str = "Evaluation", tensorboard: bool = True, figures: bool = True
) -> dict[str, Path]:
    """Write results.json, results.md (atomically), the load figure and TensorBoard scalars into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "md": out_dir / "results.md"}
    clean = {k: v for k, v in res.items() if k != "prediction_markdown"}
    write_text_atomic(paths["json"], json.dumps(clean, indent=1, default=_json_default))
    write_text_atomic(paths["md"], results_markdown(res, title))
    fig = plot_load_curve(res, out_dir / "success_vs_load.png") if figures else None
    if fig:
        paths["figure"] = fig
    if tensorboard:
        log_tensorboard(res, out_dir)
    return paths


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.bool_,)):
        return bool(x)
    raise TypeError(f"not JSON serialisable: {type(x)}")
