"""Fidelity of a calibrated curve bank against the paper (Table 6): per family, the calibrated ε and budget
next to Table 6's ε and available time, and the training loss the family's pool curves reach.

Pure functions over a loaded ``CurveBank``; ``python -m mara.fidelity`` writes the table (markdown + JSON)
and the bank's curve plot with both ε drawn.
"""

from __future__ import annotations

import numpy as np

from mara.curves.bank import CurveBank
from mara.curves.families import PAPER_FAMILY_PARAMS

#: the per-batch loss a curve ends at is averaged over its last LAST_BATCHES batches (batch size 1 is noisy)
LAST_BATCHES = 20


def eps_mid(params: dict) -> float:
    """A family entry's central ε: ``eps`` (ID) or the geometric middle of ``eps_range`` (OOD)."""
    if "eps" in params:
        return float(params["eps"])
    lo, hi = params["eps_range"]
    return float(np.sqrt(lo * hi))


def budget_range(params: dict) -> tuple[int, int]:
    """(smallest, largest) available time of a family entry."""
    b = params["budget"] if "budget" in params else params["budget_set"]
    return int(min(b)), int(max(b))


def _fmt_eps(params: dict | None) -> str:
    if not params:
        return "–"
    if "eps" in params:
        return f"{params['eps']:.4g}"
    return f"[{params['eps_range'][0]:.4g}, {params['eps_range'][1]:.4g}]"


def family_fidelity(bank: CurveBank, family: str, paper: dict | None = None, split: str = "pool") -> dict:
    """One family's row: calibrated vs. paper ε and budget, and the losses its ``split`` curves reach.

    ``L_at_budget``: mean cumulative-average loss L(B) at the paper's largest available time B;
    ``final_L``: mean over curves of L at the curve's last batch; ``final_batch_loss``: mean over curves of
    the per-batch loss averaged over the last ``LAST_BATCHES`` batches; ``reach_paper_eps``: share of curves
    whose L falls to the paper's (central) ε within B.
    """
    paper = paper if paper is not None else PAPER_FAMILY_PARAMS.get(family)
    rows = bank.rows(family, split)
    if len(rows) == 0:
        raise ValueError(f"bank {bank.path}: no {split} curves of family {family!r}")
    lengths = bank.lengths[rows]
    last_L = bank.L[rows, lengths - 1]
    last_ell = np.array([np.mean(bank.ell[r, max(0, n - LAST_BATCHES) : n]) for r, n in zip(rows, lengths)])
    cal = (bank.family_params or {}).get(family)
    out = {
        "family": family,
        "data_source": ",".join(sorted(set(bank.data_source[rows].tolist()))),
        "curves": int(len(rows)),
        "cap": int(lengths.max()),
        "eps_calibrated": _fmt_eps(cal),
        "eps_paper": _fmt_eps(paper),
        "eps_ratio": round(eps_mid(cal) / eps_mid(paper), 3) if cal and paper else None,
        "budget_calibrated": list(budget_range(cal)) if cal else None,
        "budget_paper": list(budget_range(paper)) if paper else None,
        "final_L": round(float(last_L.mean()), 4),
        "final_batch_loss": round(float(last_ell.mean()), 4),
    }
    if paper:
        b = budget_range(paper)[1]
        idx = np.minimum(lengths, b) - 1
        out["L_at_budget"] = round(float(bank.L[rows, idx].mean()), 4)
        best = np.fmin.accumulate(np.nan_to_num(bank.L[rows], nan=np.inf), axis=1)[np.arange(len(rows)), idx]
        out["reach_paper_eps"] = round(float(np.mean(best <= eps_mid(paper))), 3)
    return out


def fidelity_table(bank: CurveBank, paper_params: dict | None = None) -> list[dict]:
    """``family_fidelity`` for every family of the bank that has pool curves."""
    paper_params = paper_params if paper_params is not None else PAPER_FAMILY_PARAMS
    return [family_fidelity(bank, f, paper_params.get(f)) for f in bank.families if len(bank.rows(f, "pool"))]


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def to_markdown(rows: list[dict]) -> str:
    """The fidelity rows as a markdown table."""
    head = (
        "| family | data | pool curves | ε calibrated | ε Table 6 | ratio | budget (bank) | available time (Table 6) "
        "| L at Table-6 max time | final L | final batch loss | share reaching Table-6 ε |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def rng(b):
        return f"[{b[0]}, {b[1]}]" if b else "–"

    for r in rows:
        lines.append(
            f"| {r['family']} | {r['data_source']} | {r['curves']} | {r['eps_calibrated']} | {r['eps_paper']} | "
            f"{r['eps_ratio'] if r['eps_ratio'] is not None else '–'} | {rng(r['budget_calibrated'])} | "
            f"{rng(r['budget_paper'])} | "
            f"{r.get('L_at_budget', '–')} | {r['final_L']} | {r['final_batch_loss']} | "
            f"{_pct(r.get('reach_paper_eps'))} |"
        )
    return "\n".join(lines) + "\n"
