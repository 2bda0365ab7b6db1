"""Figures of a bank: each family's cumulative-average loss curves with the calibrated and the paper's ε and the
budget range, one TensorBoard figure per family or all families in one PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mara.curves.bank import load_bank
from mara.curves.families import PAPER_FAMILY_PARAMS
from mara.curves.fidelity import family_fidelity


def _plot_family(ax, bank, fam: str) -> None:
    """Cumulative-average loss L of each curve of ``fam`` (coloured by split), with the calibrated target ε
    (black dashed line, or grey band for an ε range), Table 6's ε (purple dotted, or purple band), the budget
    range (shaded red) when the bank carries them, and a caption: both ε and the mean final L of the pool curves."""

    for r in bank.rows(fam):
        ax.plot(
            np.arange(1, bank.lengths[r] + 1),
            bank.L[r, : bank.lengths[r]],
            lw=0.6,
            alpha=0.6,
            color={"pool": "C0", "fm_val": "C1", "fm_train": "C2", "cal": "C3"}[bank.split[r]],
        )
    fp = (bank.family_params or {}).get(fam, {})
    if "eps" in fp:
        ax.axhline(fp["eps"], color="k", ls="--", lw=1)
    elif "eps_range" in fp:
        ax.axhspan(*fp["eps_range"], color="k", alpha=0.12)
    paper = PAPER_FAMILY_PARAMS.get(fam, {})
    if "eps" in paper:
        ax.axhline(paper["eps"], color="C4", ls=":", lw=1.2)
    elif "eps_range" in paper:
        ax.axhspan(*paper["eps_range"], color="C4", alpha=0.18)
    budgets = fp.get("budget") or fp.get("budget_set")
    if budgets:
        ax.axvspan(min(budgets), max(budgets), color="C3", alpha=0.12)
    if len(bank.rows(fam, "pool")):
        f = family_fidelity(bank, fam)
        ax.text(
            0.02,
            0.03,
            f"ε bank {f['eps_calibrated']}\nε paper {f['eps_paper']}\nfinal L {f['final_L']:.3g}",
            transform=ax.transAxes,
            fontsize=6.5,
            va="bottom",
            ha="left",
            bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.7", alpha=0.8),
        )
    ax.set(
        title=f"{fam} ({len(bank.rows(fam))} curves)", xlabel="batch", ylabel="cumulative-average loss", xscale="log"
    )


def plot_bank_to_tensorboard(bank_path, log_dir) -> None:
    """One TensorBoard figure per family (see ``_plot_family``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch.utils.tensorboard import SummaryWriter

    bank = load_bank(bank_path)
    writer = SummaryWriter(str(log_dir))
    for fam in bank.families:
        fig, ax = plt.subplots(figsize=(6, 4))
        _plot_family(ax, bank, fam)
        writer.add_figure(f"curves/{fam}", fig)
        plt.close(fig)
    writer.close()


def plot_bank_grid(bank_path, png_path) -> Path:
    """All families of a bank in one PNG: curves by split (pool blue, fm_val orange, fm_train green), calibrated
    ε dashed black (or grey band), Table 6's ε dotted purple (or purple band), budget range shaded red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bank = load_bank(bank_path)
    fams = bank.families
    ncol = min(5, len(fams))
    nrow = -(-len(fams) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol, 2.8 * nrow), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        _plot_family(ax, bank, fam)
        ax.title.set_fontsize(9)
        ax.set_xlabel("batch", fontsize=8)
        ax.set_ylabel("")
    for ax in list(axes.flat)[len(fams) :]:
        ax.axis("off")
    fig.supylabel("cumulative-average loss", x=0.005)
    fig.tight_layout(rect=(0.012, 0, 1, 1))
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
