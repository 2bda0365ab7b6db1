"""The suite figure (``python -m mara.report suite``): per cluster, each learned method minus that setting's best
non-learned method at every load, ± one standard error, beside the ±0.2 band the suite target allows.

Input: the suite table's summary (mara/report/suite.py)
``{setting: {load: {"best": rule, <learned>: {diff, se, n}, ...}}}``.
"""

from __future__ import annotations

from pathlib import Path

from mara.report.styles import method_style

TOLERANCE = 0.2  # points below a setting's best rule that the suite target allows


def learned_in(summary: dict) -> list[str]:
    """The learned methods with a paired difference in every (setting, load) cell of ``summary``, in first-seen
    order."""
    cells = [cell for per in summary.values() for cell in per.values()]
    names = dict.fromkeys(k for cell in cells for k, v in cell.items() if isinstance(v, dict) and "diff" in v)
    return [m for m in names if all(isinstance(c.get(m), dict) for c in cells)]


def suite_figure(summary: dict, path: Path) -> Path | None:
    """One panel per setting: learned − best rule (points) against the load; -> the PNG written, or None when no
    learned method was evaluated."""
    methods = learned_in(summary)
    if not methods:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(3.6 * len(summary), 3.4), sharey=True, squeeze=False)
    for ax, (name, per) in zip(axes[0], summary.items()):
        loads = sorted(per, key=float)
        x = [float(p) for p in loads]
        ax.axhspan(-TOLERANCE, TOLERANCE, color="0.9", zorder=0)
        ax.axhline(0.0, color="0.4", linewidth=0.8, zorder=1)
        for j, m in enumerate(methods):
            style = method_style(m)
            shift = (j - (len(methods) - 1) / 2) * 0.0012  # side by side at each load
            ax.errorbar(
                [v + shift for v in x],
                [per[p][m]["diff"] for p in loads],
                yerr=[per[p][m]["se"] for p in loads],
                label=m,
                capsize=2,
                color=style["color"],
                marker=style["marker"],
                linewidth=1.5,
            )
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("load p (per 7 nodes)")
        ax.set_xticks(x)
    axes[0][0].set_ylabel("learned − best rule (points)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Learned − best non-learned method, ± 1 s.e. (grey: within {TOLERANCE})", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
