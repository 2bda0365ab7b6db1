"""What a cluster operator reads from a trace run: results.json / results.md, occupancy figure, TensorBoard.

A folder's results.json merges by method (mara/core/rundir.py): a trace run keeps the rows, windows and timings of
the methods it does not replay, and reuses those of a method it lists that was replayed there with the same
``method_settings`` (its ``trace_scheduler`` block, the count it plans on; checkpoint contents) on the same protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mara.core.files import write_text_atomic
from mara.core.results import EarlierResults, checkpoint_digests, earlier_results
from mara.traces.schema import SIZE_CLASSES


def _mean_se(x) -> tuple[float, float]:
    """Mean and standard error over windows (se 0 for one window)."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else 0.0


def _per_window(rows, method, key, sel=None):
    """{window: mean of ``key`` over the method's rows (None values skipped)} for rows passing ``sel``."""
    acc: dict = {}
    for r in rows:
        if r["method"] != method or (sel is not None and not sel(r)):
            continue
        v = r[key]
        acc.setdefault(r["window"], [])
        if v is not None:
            acc[r["window"]].append(float(v))
    return {w: (float(np.mean(v)) if v else float("nan")) for w, v in acc.items()}


def summarise(rows, windows_info, methods) -> dict:
    """Per method: deadline-met ratio, JCT, queueing delay, GPU utilisation (mean ± se over windows), paired
    difference to the first method, and deadline-met ratio per size class and per model."""
    out = {}
    base = methods[0]
    for m in methods:
        met = _per_window(rows, m, "deadline_met")
        s = {
            "deadline_met": _mean_se(list(met.values())),
            "jct_h": _mean_se([v / 3600 for v in _per_window(rows, m, "jct_s").values()]),
            "queue_h": _mean_se([v / 3600 for v in _per_window(rows, m, "queue_s").values()]),
            "declined": _mean_se(list(_per_window(rows, m, "declined").values())),
            "gpu_utilisation": _mean_se([w["gpu_utilisation"] for w in windows_info if w["method"] == m]),
            "jobs": sum(1 for r in rows if r["method"] == m),
        }
        if m != base:
            b = _per_window(rows, base, "deadline_met")
            s["minus_" + base] = _mean_se([met[w] - b[w] for w in met if w in b])
        s["by_size"] = {
            c: _mean_se(list(_per_window(rows, m, "deadline_met", lambda r, c=c: r["size_class"] == c).values()))
            for c in SIZE_CLASSES
            if any(r["size_class"] == c for r in rows)
        }
        models = sorted({r["model"] for r in rows})
        s["by_model"] = {
            k: _mean_se(list(_per_window(rows, m, "deadline_met", lambda r, k=k: r["model"] == k).values()))
            for k in models
        }
        out[m] = s
    return out


def _pm(ms) -> str:
    m, se = ms
    return "-" if np.isnan(m) else f"{m:.3f} ± {se:.3f}"


def _scope(p: dict) -> str:
    if p["first_jobs"]:
        return f"first {p['first_jobs']} jobs by submission time"
    if p["window_s"] is None:
        return "the whole trace"
    return f"windows of {p['window_s']} s after {p['warmup_s']} s of warm-up"


def _breakdown(summ: dict, methods: list, key: str, columns: list, title: str) -> list[str]:
    """A markdown section: one row per method, one column per group of ``summ[method][key]`` (deadline met ± s.e.)."""
    lines = ["", f"## {title}", "", "| method | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(_pm(summ[m][key].get(c, (np.nan, np.nan))) for c in columns) + " |")
    return lines


def trace_markdown(res: dict) -> str:
    """results.md of a trace run."""
    p, summ = res["protocol"], res["summary"]
    methods = list(summ)
    lines = [
        f"# Trace replay: {Path(p['trace']).name} on {p['cluster']} ({p['gpus']} GPUs)",
        "",
        f"{len(p['windows'])} {p['split']} window(s); slot {p['slot_s']} s; "
        f"{_scope(p)}; "
        f"numbers are mean ± standard error over windows, on identical jobs for every method.",
        "",
        *([f"**{p['bank_note']}**", ""] if p.get("bank_note") else []),
        "| method | deadline met | paired vs "
        + methods[0]
        + " | declined | JCT (h) | queueing (h) | GPU utilisation | "
        "replay (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        s = summ[m]
        diff = _pm(s["minus_" + methods[0]]) if "minus_" + methods[0] in s else "-"
        lines.append(
            f"| {m} | {_pm(s['deadline_met'])} | {diff} | {_pm(s['declined'])} | {_pm(s['jct_h'])} | "
            f"{_pm(s['queue_h'])} | {_pm(s['gpu_utilisation'])} | {res['timings'][m]:.1f} |"
        )
    classes = [c for c in SIZE_CLASSES if any(c in summ[m]["by_size"] for m in methods)]
    lines += _breakdown(summ, methods, "by_size", classes, "Deadline met by job size (GPUs asked)")
    models = sorted({k for m in methods for k in summ[m]["by_model"]})
    lines += _breakdown(summ, methods, "by_model", models, "Deadline met by model")
    lines += [
        "",
        "## Decision time",
        "",
        "| method | window | jobs | decisions | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for w in res["windows"]:
        lines.append(
            f"| {w['method']} | {w['window']} | {w['jobs']} | {w['decisions']} | {w['decision_ms_p50']:.2f} | "
            f"{w['decision_ms_p99']:.2f} |"
        )
    if res.get("figures"):
        lines += ["", "## GPU occupancy by job size", ""] + [
            f"![{k}]({Path(v).name})" for k, v in res["figures"].items()
        ]
    return "\n".join(lines) + "\n"


def plot_occupancy(occupancy: dict, gpus: int, path: Path) -> Path | None:
    """Stacked GPUs in use by size class over trace time, one panel per method (first window)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return None
    fig, axes = plt.subplots(len(occupancy), 1, figsize=(9, 2.4 * len(occupancy)), sharex=True, squeeze=False)
    for ax, (m, (t, occ)) in zip(axes[:, 0], occupancy.items()):
        ax.stackplot(np.asarray(t) / 3600, occ.T, labels=[f"{c} GPU jobs" for c in SIZE_CLASSES], step="post")
        ax.axhline(gpus, color="k", lw=0.6)
        ax.set_ylabel(f"{m}\nGPUs in use")
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("hours since the window's first job")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass
class EarlierTrace:
    """What a trace folder's results.json already holds, for a run: ``kept`` (the rows of the methods it does not
    replay, and of those it reuses: mara/core/rundir.py ``EarlierResults``) and the earlier file's per-method parts
    (``old``: its windows, timings and method settings)."""

    kept: EarlierResults = field(default_factory=EarlierResults)
    old: dict = field(default_factory=dict)

    @property
    def others(self) -> list[str]:
        """The methods whose rows are kept as they are (not listed by this run), in the earlier file's order."""
        have = {r["method"] for r in self.kept.other}
        return [m for m in self.order if m in have]

    @property
    def order(self) -> list[str]:
        return list(self.old.get("summary") or {})

    def part(self, key: str, methods) -> dict:
        """The earlier file's ``key`` block ({method: value}) for ``methods``."""
        return {m: v for m, v in (self.old.get(key) or {}).items() if m in methods}

    def windows(self, methods) -> list[dict]:
        """The earlier file's per-window records of ``methods``."""
        return [w for w in self.old.get("windows") or [] if w["method"] in methods]


def earlier_trace_results(out: Path, protocol: dict, method_settings: dict, resume: bool = True) -> EarlierTrace:
    """What ``out/results.json`` keeps for a trace run of ``method_settings`` ({method: its trace settings}) on
    ``protocol``: another kind of results is refused, another protocol moved aside (rundir ``earlier_results``)."""
    path = Path(out) / "results.json"
    base = {"protocol": protocol, "method_settings": method_settings}
    kept = earlier_results(path, base, list(method_settings), resume, kind="trace", settings_key="method_settings")
    old = json.loads(path.read_text()) if path.exists() and (kept.done or kept.other) else {}
    return EarlierTrace(kept, old)


def write_trace_results(
    rows,
    windows_info,
    occupancy,
    protocol,
    timings,
    out: Path,
    tensorboard: bool = True,
    cpu_timings: dict | None = None,
    method_settings: dict | None = None,
    earlier: EarlierTrace | None = None,
) -> dict:
    """Write results.json, results.md, occupancy.png and TensorBoard scalars into ``out``; returns the results.
    ``timings``: wall seconds of each method's replays; ``cpu_timings``: their CPU seconds (``timings_cpu``);
    ``method_settings``: each method's trace settings; ``earlier``: the folder's earlier results, merged by method
    (the occupancy figure shows the methods replayed by this run)."""
    out = Path(out)
    earlier = earlier or EarlierTrace()
    others, settings = earlier.others, dict(method_settings or {})
    methods = [m for m in earlier.order if m in others or m in timings] + [m for m in timings if m not in earlier.order]
    wall = {**earlier.part("timings", others), **timings}
    cpu = {**earlier.part("timings_cpu", others), **(cpu_timings or {})}
    all_windows = earlier.windows(others) + list(windows_info)
    rows = earlier.kept.other + list(rows)
    res = {
        "kind": "trace",
        "protocol": protocol,
        "method_settings": {**earlier.kept.overrides, **settings},
        "checkpoint_digests": {**earlier.kept.digests, **checkpoint_digests(settings)},
        "timings": {m: wall.get(m, float("nan")) for m in methods},
        **({"timings_cpu": {m: cpu[m] for m in methods if m in cpu}} if cpu else {}),
        "windows": all_windows,
        "summary": summarise(rows, all_windows, methods),
        "rows": rows,
    }
    fig = plot_occupancy(occupancy, protocol["gpus"], out / "occupancy.png") if occupancy else None
    if fig:
        res["figures"] = {"occupancy": str(fig)}
    elif earlier.old.get("figures") and (out / "occupancy.png").exists():
        res["figures"] = earlier.old["figures"]
    write_text_atomic(out / "results.json", json.dumps(res, indent=1, default=float))
    md = trace_markdown(res)
    write_text_atomic(out / "results.md", md)
    if tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter

            with SummaryWriter(log_dir=str(out / "tb")) as w:
                for m, s in res["summary"].items():
                    for key in ("deadline_met", "jct_h", "queue_h", "gpu_utilisation", "declined"):
                        w.add_scalar(f"trace/{m}/{key}", s[key][0], 0)
                    for c, v in s["by_size"].items():
                        w.add_scalar(f"trace/{m}/deadline_met_size_{c}", v[0], 0)
        except Exception:  # tensorboard missing: results files still written
            pass
    res["paths"] = {"json": str(out / "results.json"), "md": str(out / "results.md")}
    return res
