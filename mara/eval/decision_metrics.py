"""Decision-relevant prediction metrics: how well an estimate of the remaining batches supports the
least-slack rule's two decisions, as pure functions over prediction-benchmark queries.

* **finish decision** — "does the task finish before its deadline if it is served from now on?": predicted
  ``s0 + p̂ ≤ B`` against the truth ``first ≤ B`` (s0 = processed batches at the query, B = the budget, first =
  the curve's first crossing of ε). Reported as accuracy, and as the two error rates a scheduler feels
  differently: *false hopeless* (truly finishable, judged hopeless: the rule drops a task it could have saved) and
  *false finishable* (truly hopeless, judged finishable: the rule spends nodes on a task that fails), overall and
  by the number of observations at the query.
* **slack ranking** — Spearman rank correlation between the predicted slack ``(B − s0) − p̂`` and the true slack
  ``(B − s0) − truth``: the least-slack order only needs the ranks right.
"""

from __future__ import annotations

import numpy as np

OBS_BINS = (4, 6, 10, 20, 40)  # number-of-observation bins [4, 6), [6, 10), [10, 20), [20, 40), [40, ∞)


def rankdata(x) -> np.ndarray:
    """Ranks 1..n of ``x`` with ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1)
    vals, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    return (sums / counts)[inv]


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson correlation of tie-averaged ranks); nan if either side is constant."""
    rx, ry = rankdata(x), rankdata(y)
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def finish_scores(pred_ok, true_ok) -> dict:
    """Accuracy, false-hopeless rate (among truly finishable) and false-finishable rate (among truly hopeless)."""
    pred_ok, true_ok = np.asarray(pred_ok, bool), np.asarray(true_ok, bool)
    n, n_pos, n_neg = len(true_ok), int(true_ok.sum()), int((~true_ok).sum())
    nan = float("nan")
    return {
        "acc": float((pred_ok == true_ok).mean()) if n else nan,
        "false_hopeless": float((~pred_ok & true_ok).sum() / n_pos) if n_pos else nan,
        "false_finishable": float((pred_ok & ~true_ok).sum() / n_neg) if n_neg else nan,
        "n": int(n),
    }


def obs_bin_labels(edges=OBS_BINS) -> list[str]:
    return [f"{a}–{b - 1}" for a, b in zip(edges[:-1], edges[1:])] + [f"≥{edges[-1]}"]


def decision_metrics(s0, budget, first, truth, n_obs, pred, edges=OBS_BINS) -> dict:
    """Both decisions for one estimate ``pred`` [Q] of the remaining batches (arrays [Q] for every query)."""
    s0, budget, first = (np.asarray(a, np.float64) for a in (s0, budget, first))
    truth, pred, n_obs = np.asarray(truth, np.float64), np.asarray(pred, np.float64), np.asarray(n_obs)
    tau = budget - s0
    pred_ok, true_ok = pred <= tau, first <= budget
    out = finish_scores(pred_ok, true_ok)
    bins = np.digitize(n_obs, edges) - 1  # -1: fewer than edges[0] observations (not a decision: cold)
    out["by_obs"] = {
        lab: finish_scores(pred_ok[bins == i], true_ok[bins == i]) for i, lab in enumerate(obs_bin_labels(edges))
    }
    out["slack_spearman"] = spearman(tau - pred, tau - truth)
    return out


def decision_markdown(results: dict) -> str:
    """One table per task set: estimates × (finish accuracy overall and by observations, error rates, Spearman)."""
    lines = []
    for ts, per in results.items():
        if not per:
            continue
        labels = list(next(iter(per.values()))["by_obs"])
        lines += [
            f"**{ts}** — finish-before-the-deadline decisions and slack ranking",
            "",
            "| Estimate | acc. (%) | "
            + " | ".join(f"acc. n_obs {lab}" for lab in labels)
            + " | false hopeless (%) | false finishable (%) | slack Spearman |",
            "|---|---:|" + "---:|" * len(labels) + "---:|---:|---:|",
        ]
        for name, m in per.items():
            cells = [_pct(m["acc"])] + [f"{_pct(m['by_obs'][lab]['acc'])} ({m['by_obs'][lab]['n']})" for lab in labels]
            lines.append(
                f"| {name} | "
                + " | ".join(cells)
                + f" | {_pct(m['false_hopeless'])} | {_pct(m['false_finishable'])} | "
                f"{m['slack_spearman']:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def _pct(x) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{100 * x:.1f}"
