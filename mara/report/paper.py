"""The paper-protocol report: ``report.md`` + ``report.json`` (+ figures) from a run folder of
``python -m mara.train experiment=paper``, every table with the paper's numbers (mara.report.paper_numbers)
in adjacent columns and the difference. Generic over the methods present: a method the paper lacks gets
"–" in the paper columns; one the run lacks is left out. The rows: :mod:`mara.report.paper_tables`; their
markdown: :mod:`mara.report.paper_markdown`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from mara.core.files import write_text_atomic
from mara.core.jobs import done_info
from mara.report import paper_numbers as P
from mara.report.decomposition import gap_decomposition
from mara.report.paper_markdown import readme_markdown, report_markdown
from mara.report.paper_tables import (
    by_load,
    paired_differences,
    protocol_stats,
    summary_cell,
    table1,
    table2,
    table3,
    table4,
    table5,
)
from mara.report.results import ordered_methods
from mara.report.styles import method_style

__all__ = ["build_report", "write_report", "figure4", "copy_figures_for_readme", "report_markdown", "readme_markdown"]


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------------------------------- figures
def figure4(summary: dict, path: Path) -> Path | None:
    """Success vs load for every method (its style: mara/report/styles.py), ±1 sample std, paper's stated points
    hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = sorted({float(ld) for m in summary.values() for ts in m.values() for ld in ts})
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    for m in ordered_methods(summary):
        key = "Average" if "Average" in summary[m] else next(iter(summary[m]))
        pts = [(ld, summary[m][key].get(f"{ld:g}")) for ld in loads]
        pts = [(ld, c) for ld, c in pts if summary_cell(c)]
        if not pts:
            continue
        xs = np.array([ld for ld, _ in pts])
        mu = np.array([c["mean"] for _, c in pts])
        sd = np.array([c["std"] for _, c in pts])
        style = method_style(m)
        ax.plot(xs, mu, label=m, **style)
        ax.fill_between(xs, mu - sd, mu + sd, alpha=0.12, color=style["color"], linewidth=0)
        paper = P.FIGURE4.get(m)
        if paper:
            ax.plot(
                list(paper), list(paper.values()), linestyle="none", marker="s", mfc="none", ms=9, color=style["color"]
            )
    ax.plot([], [], linestyle="none", marker="s", mfc="none", color="gray", label="paper (stated in §5.3/§5.6)")
    ax.set_xlabel("arrival probability p")
    ax.set_ylabel("success rate (%)")
    ax.set_title("Figure 4: load generalisation (mean ± 1 sd over seeds × roots)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------- report
def build_report(run: Path, timings: dict | None = None) -> dict:
    """report.json's content from a run folder (missing parts are recorded as missing, never invented)."""
    run = Path(run)
    ev = _load(run / "evaluation" / "results.json") or {}
    st = _load(run / "stress" / "results.json") or {}
    pr = (_load(run / "prediction" / "prediction.json") or {}).get("results")
    summary = ev.get("summary") or {}
    rep = {
        "schema": "mara.report/1",
        "run": str(run),
        "table1": table1(pr),
        "table2": table2(summary),
        "table3": table3(st.get("summary") or {}),
        "table4": table4(ev.get("diagnostics") or {}),
        "table5": table5(summary),
        "protocol": protocol_stats(ev) if ev else [],
        "loads": sorted({float(ld) for m in summary.values() for ts in m.values() for ld in ts}),
        "skipped": {**(ev.get("skipped") or {}), **{f"{k} (stress)": v for k, v in (st.get("skipped") or {}).items()}},
        "failed": {**(ev.get("failed") or {}), **{f"{k} (stress)": v for k, v in (st.get("failed") or {}).items()}},
        "by_load": by_load(summary, st.get("summary") or {}),
        "mara_minus": paired_differences(ev.get("rows") or []),
        "decomposition": gap_decomposition(ev.get("rows") or []),  # allocation / prediction gap
        "bank": ev.get("bank"),
        "bank_sources": _bank_sources(ev.get("bank")),
        "clairvoyant": ev.get("clairvoyant"),
        "evaluation_protocol": ev.get("protocol"),
        "stage_timings_s": timings or _load(run / "stage_timings.json") or {},
        "figures": {},
    }
    trainings = sorted((run / "policy").glob("*/seed*/DONE.json"))
    rep["trainings"] = [done_info(p.parent) for p in trainings]  # its files resolved in this run folder
    return rep


def _bank_sources(path) -> dict | None:
    """{data_source: [families]} of the evaluated bank (None when it cannot be read)."""
    try:
        import pyarrow.parquet as pq

        t = pq.read_table(path, columns=["family", "data_source"]).to_pydict()
    except Exception:
        return None
    out: dict = {}
    for fam, src in sorted(set(zip(t["family"], t["data_source"]))):
        out.setdefault(src, []).append(fam)
    return out


def write_report(run: Path, timings: dict | None = None) -> dict[str, Path]:
    """Write ``report.md``, ``report.json`` and ``figure4_success_vs_load.png`` into the run folder."""
    run = Path(run)
    rep = build_report(run, timings)
    ev = _load(run / "evaluation" / "results.json") or {}
    if ev.get("summary") and len(rep["loads"]) >= 1:
        rep["figures"]["figure4"] = str(figure4(ev["summary"], run / "figure4_success_vs_load.png"))
    for name in ("fig3a_trajectory.png", "fig3b_mae_vs_rank.png"):
        if (run / "prediction" / name).exists():
            rep["figures"][name.split("_")[0]] = str(run / "prediction" / name)
    paths = {
        "md": write_text_atomic(run / "report.md", report_markdown(rep)),
        "json": write_text_atomic(run / "report.json", json.dumps(rep, indent=1, default=float)),
    }
    return paths


def copy_figures_for_readme(rep: dict, dest: Path) -> list[Path]:
    """Copy the report's figures next to the README (docs/figures/paper_*.png); returns the copies."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for key, src in rep.get("figures", {}).items():
        if Path(src).exists():
            out.append(Path(shutil.copyfile(src, dest / f"paper_{key}.png")))
    return out
