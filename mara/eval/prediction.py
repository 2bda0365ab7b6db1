"""Prediction benchmark (paper §5.2, Table 1, Figure 3): FM vs WLS as remaining-demand predictors, and any others
named in ``prediction.extra`` (rows of their own: e.g. the calibrated FM, the decision head).

Queries: for each curve of a task set, ε and budget B drawn deterministically from ``family_params``
and eight prefixes (query ranks) spread over the budget on the obs_every grid; a query counts only if
the curve has not crossed ε by its prefix end (the simulator would have retired the task).
Metrics: capped remaining-batch MAE, budget-success accuracy (predicted crossing within B ↔ true
crossing within B), milliseconds per prefix for one batched call; q10–q90 coverage of the true remaining batches
for predictors with a band; all of them also per observation-count bin (``by_obs``), and on cold queries (1–3
observations of the same curves and draws, ``cold``), where a predictor without a cold estimate answers the cap.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mara.allocators.slack import band_quantile
from mara.core.config import conf_dir
from mara.curves.bank import CurveBank, default_bank_path, load_bank
from mara.curves.families import ID_FAMILIES
from mara.eval.decision_metrics import (
    OBS_BINS,
    decision_markdown,
    decision_metrics,
    obs_bin_labels,
)
from mara.eval.settings import PredictionSettings
from mara.predictors.bands.conformal import band_metrics
from mara.predictors.baselines.wls import wls_fit
from mara.predictors.factory import predictor_from
from mara.predictors.prefix import build_cold_queries, build_queries, observe, query_inputs

CONF_PREDICTOR = conf_dir("predictor")
COLD_OBS = (1, 2, 3)  # observation counts of cold tasks (a warm estimate needs 4)
TASK_SETS = {
    "ID": (tuple(ID_FAMILIES), "fm_val"),
    "RL_OOD": (("RLExpertConfig",), "pool"),
    "ViT_OOD": (("ViT_Cifar10_1",), "pool"),
}


def concat_queries(qs: list[dict]) -> dict:
    """One query set from several (e.g. a family's fm_val and pool queries)."""
    qs = [q for q in qs if len(q["rows"])]
    return {k: np.concatenate([q[k] for q in qs]) for k in qs[0]} if qs else {}


def _timed(fn, repeats: int = 3):
    best, out = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def evaluate_predictor(
    predictor, bank: CurveBank, q: dict, obs_every: int = 10, n_ranks: int = 8, obs_edges=OBS_BINS
) -> tuple[dict, np.ndarray]:
    """Metrics of one predictor on one query set (latency = best of 3 batched calls, incl. feature building)."""
    rows = q["rows"]

    def call():
        return predictor.predict_remaining(*query_inputs(bank, q, obs_every), family=bank.family[rows])

    pred, secs = _timed(call)
    band, qs = {}, None
    if hasattr(predictor, "predict_quantiles"):
        qs = predictor.predict_quantiles(*query_inputs(bank, q, obs_every), family=bank.family[rows])
        band = band_metrics(qs, q["truth"])
        levels = [float(x) for x in getattr(predictor, "quantiles", ())]
        if len(levels) == qs.shape[1]:  # the reliability of each band level: share of truths at or below it
            band["levels"] = levels
            band["level_hits"] = [float((q["truth"] <= qs[:, j] + 1e-9).mean()) for j in range(len(levels))]
    s0 = q["n_obs"] * obs_every
    err = np.abs(pred - q["truth"])
    pred_ok = s0 + pred <= q["budget"]
    true_ok = q["first"] <= q["budget"]
    per_rank = [float(err[q["rank"] == k].mean()) if (q["rank"] == k).any() else float("nan") for k in range(n_ranks)]
    return {
        "mae": float(err.mean()),
        "budget_acc": float((pred_ok == true_ok).mean()),
        "ms_per_prefix": 1e3 * secs / len(rows),
        "per_rank_mae": per_rank,
        "n_queries": int(len(rows)),
        **band,
        "by_obs": metrics_by_obs(q["n_obs"], err, pred_ok == true_ok, qs, q["truth"], obs_edges),
    }, pred


def metrics_by_obs(n_obs, err, correct, qs, truth, edges=OBS_BINS) -> dict:
    """{n_obs bin: MAE, finish-decision accuracy, q10–q90 coverage (None without a band), n} over queries [Q]."""
    bins = np.digitize(np.asarray(n_obs), edges) - 1
    out = {}
    for i, lab in enumerate(obs_bin_labels(edges)):
        m = bins == i
        n = int(m.sum())
        nan = float("nan")
        out[lab] = {
            "mae": float(err[m].mean()) if n else nan,
            "budget_acc": float(correct[m].mean()) if n else nan,
            "coverage": (band_metrics(qs[m], truth[m])["coverage"] if n else nan) if qs is not None else None,
            "n": n,
        }
    return out


def predictor_rows(res: dict) -> list[str]:
    """The predictor rows of one task set's results (FM, WLS, then the extra ones), without its other entries."""
    return [m for m in res if m not in ("decision", "cold")]


def by_obs_markdown(results: dict, edges=OBS_BINS) -> str:
    """One table: task set × method rows, per n_obs bin the MAE / finish accuracy (%) / q10–q90 coverage (%)."""
    labels = obs_bin_labels(edges)
    lines = [
        "| Task set | Method | " + " | ".join(f"n_obs {lab}: MAE / acc. / cov." for lab in labels) + " |",
        "|---|---|" + "---:|" * len(labels),
    ]
    for ts, res in results.items():
        for m in predictor_rows(res):
            cells = []
            for lab in labels:
                b = res[m].get("by_obs", {}).get(lab)
                if not b or not b["n"]:
                    cells.append("–")
                    continue
                cov = "–" if b["coverage"] is None else f"{100 * b['coverage']:.0f}"
                cells.append(f"{b['mae']:.0f} / {100 * b['budget_acc']:.0f} / {cov} ({b['n']})")
            lines.append(f"| {ts} | {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reliability_figure(results: dict, out_dir: Path) -> str | None:
    """``fig_calibration.png``: per task set, each band level against the share of true remaining batches at or
    below it, for every predictor whose results carry ``level_hits`` (on the diagonal = the level holds)."""
    sets = {
        ts: {m: r for m, r in res.items() if isinstance(r, dict) and r.get("level_hits")} for ts, res in results.items()
    }
    sets = {ts: per for ts, per in sets.items() if per}
    if not sets:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(4 * len(sets), 4), squeeze=False)
    for ax, (ts, per) in zip(axes[0], sets.items()):
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls=":")
        for m, r in per.items():
            ax.plot(r["levels"], r["level_hits"], marker="o", ms=4, label=f"{m} ({100 * r['coverage']:.0f} %)")
        ax.set_title(f"{ts}: band levels against the truth", fontsize=9)
        ax.set_xlabel("level")
        ax.set_ylabel("share of truths at or below it")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, title="predictor (outer-level coverage)", title_fontsize=7)
    return _save(fig, out_dir / "fig_calibration.png", dpi=110)


def _save(fig, path: Path, dpi: int = 120) -> str:
    """Lay the figure out tightly, write it to ``path`` and close it; returns the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return str(path)


def _figure(bank, fm, wls, q, out_dir: Path, results: dict, obs_every: int, rank: int = 3) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    # (a) a representative ID query: the first fm_val curve's query at a middle rank
    i = int(np.flatnonzero(q["rank"] == rank)[0]) if (q["rank"] == rank).any() else 0
    r, n, eps = q["rows"][i], q["n_obs"][i], q["eps"][i]
    bs = bank.batch_size[r]
    S, L = observe(bank, np.array([r]), np.array([n]), obs_every)
    cap = np.array([q["cap"][i]])
    edges, L_hat = fm.sample_futures(S, L, np.array([n]), cap, np.array([bs]), np.array([bank.lr[r]]), 8, 4)
    x_e = edges[0] / bs
    fm_rem = fm.predict_remaining(S, L, np.array([n]), np.array([eps]), cap, np.array([bs]), np.array([bank.lr[r]]))[0]
    wls_rem = wls.predict_remaining(S, L, np.array([n]), np.array([eps]), cap, np.array([bs]), np.array([bank.lr[r]]))[
        0
    ]
    t0, t1 = wls_fit(S, L, np.array([n]))
    s0 = n * obs_every
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, bank.lengths[r] + 1), bank.L[r, : bank.lengths[r]], color="0.4", lw=1, label="truth")
    ax.plot(S[0] / bs, L[0], "ko", ms=3, label="observed prefix")
    for k in range(L_hat.shape[1]):
        ax.plot(x_e, L_hat[0, k], color="tab:blue", alpha=0.35, lw=0.8, label="FM samples" if k == 0 else None)
    ax.plot(x_e, np.median(L_hat[0], axis=0), color="tab:blue", lw=2, label="FM median")
    ax.plot(x_e, np.exp(t0[0]) * edges[0] ** t1[0], color="tab:orange", lw=2, ls="--", label="WLS extrapolation")
    ax.axhline(eps, color="k", ls=":", lw=1, label="ε")
    ax.axvline(q["first"][i], color="0.4", lw=1)
    ax.axvline(s0 + fm_rem, color="tab:blue", lw=1)
    ax.axvline(s0 + wls_rem, color="tab:orange", lw=1, ls="--")
    ax.set_xlabel("batches")
    ax.set_ylabel("cumulative-average loss")
    ax.set_title(
        f"{bank.family[r]}: true {q['truth'][i]:.0f}, FM {fm_rem:.0f}, WLS {wls_rem:.0f} batches left", fontsize=9
    )
    ax.legend(fontsize=7)
    paths.append(_save(fig, out_dir / "fig3a_trajectory.png"))
    # (b) MAE vs query rank
    fig, ax = plt.subplots(figsize=(6, 4))
    for (ts, res), c in zip(results.items(), ("tab:green", "tab:red", "tab:purple")):
        for m, ls in (("FM", "-"), ("WLS", "--")):
            ax.plot(
                np.arange(1, len(res[m]["per_rank_mae"]) + 1),
                res[m]["per_rank_mae"],
                ls,
                color=c,
                marker="o",
                ms=3,
                label=f"{ts} {m}",
            )
    ax.set_xlabel("query rank")
    ax.set_ylabel("remaining-batch MAE")
    ax.legend(fontsize=7)
    paths.append(_save(fig, out_dir / "fig3b_mae_vs_rank.png"))
    return paths


def decision_estimates(fm, wls, bank: CurveBank, q: dict, obs_every: int = 10, quantiles=(0.05,), extra=()) -> dict:
    """{name: remaining-batch estimate [Q]} the decision metrics compare: FM median and band (q10, q90 and the
    ``quantiles`` of ``band_quantile``, the estimate Slack-FM-q reads), WLS median and its q10; each ``extra``
    (label, predictor) its median and its band's ends at their own levels."""

    rows = q["rows"]
    args = query_inputs(bank, q, obs_every)
    out = {}
    for name, p in (("FM", fm), ("WLS", wls), *extra):
        if hasattr(p, "predict_quantiles"):
            qs = p.predict_quantiles(*args, family=bank.family[rows])
            lo, med, hi = qs[:, 0], qs[:, qs.shape[1] // 2], qs[:, -1]
        else:
            lo = med = hi = p.predict_remaining(*args, family=bank.family[rows])
        out[f"{name} median"] = med
        if name == "WLS":
            out["WLS q10"] = lo
        elif name == "FM":
            out["FM q10"], out["FM q90"] = lo, hi
            for x in quantiles:
                if x not in (0.1, 0.5, 0.9):
                    out[f"FM q{x:g}"] = band_quantile(lo, med, hi, float(x))
        elif hasattr(p, "predict_quantiles"):
            levels = getattr(p, "quantiles", (0.1, 0.5, 0.9))
            out[f"{name} q{levels[0]:g}"], out[f"{name} q{levels[-1]:g}"] = lo, hi
    return out


def decision_results(fm, wls, bank: CurveBank, q: dict, obs_every: int = 10, quantiles=(0.05,), extra=()) -> dict:
    """Decision-relevant metrics (mara.eval.decision_metrics) of every estimate on one query set."""

    s0 = q["n_obs"] * obs_every
    return {
        name: decision_metrics(s0, q["budget"], q["first"], q["truth"], q["n_obs"], est)
        for name, est in decision_estimates(fm, wls, bank, q, obs_every, quantiles, extra).items()
    }


def table1_markdown(results: dict) -> str:
    lines = [
        "| Task set | Method | MAE (batches) | Budget acc. (%) | q10–q90 coverage (%) | band width | ms / prefix |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for ts, res in results.items():
        for m in predictor_rows(res):
            r = res[m]
            cov = f"{100 * r['coverage']:.1f}" if "coverage" in r else "–"
            wid = f"{r['band_width']:.1f}" if "band_width" in r else "–"
            lines.append(
                f"| {ts} | {m} | {r['mae']:.2f} | {100 * r['budget_acc']:.2f} | {cov} | {wid} | "
                f"{r['ms_per_prefix']:.4f} |"
            )
    return "\n".join(lines) + "\n"


def run_prediction_benchmark(
    bank: CurveBank,
    fm,
    wls,
    family_params: dict,
    out_dir,
    n_ranks: int = 8,
    obs_every: int = 10,
    seed: int = 0,
    decision_quantiles=(0.05,),
    extra=(),
) -> dict:
    """Table 1 + Figure 3 on ID fm_val curves and each OOD family's pool curves; writes PNGs, table1.md,
    prediction.json. With ``decision_quantiles`` (not None) each task set also gets ``decision``: the
    decision-relevant metrics of the FM median / band quantiles and WLS (mara.eval.decision_metrics), also in
    table1.md. ``extra``: ((label, predictor), ...) scored on the same queries in rows of their own (the figure
    stays FM vs WLS)."""
    named = (("FM", fm), ("WLS", wls), *extra)
    import torch

    torch.set_num_threads(1)  # latency on one core
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results, queries, cold = {}, {}, {}
    for ts, (fams, split) in TASK_SETS.items():
        fams = [f for f in fams if len(bank.rows(f, split))]
        if not fams:
            continue
        q = build_queries(bank, fams, split, family_params, n_ranks, obs_every, seed)
        queries[ts] = q
        results[ts] = {name: evaluate_predictor(p, bank, q, obs_every, n_ranks)[0] for name, p in named}
        if decision_quantiles is not None:
            results[ts]["decision"] = decision_results(fm, wls, bank, q, obs_every, decision_quantiles, extra)
        qc = build_cold_queries(bank, fams, split, family_params, COLD_OBS, obs_every, seed)
        if len(qc["rows"]):
            cold[ts] = {
                name: evaluate_predictor(p, bank, qc, obs_every, len(COLD_OBS), COLD_OBS)[0] for name, p in named
            }
    figs = (
        _figure(
            bank,
            fm,
            wls,
            queries["ID"],
            out_dir,
            {ts: {m: r[m] for m in ("FM", "WLS")} for ts, r in results.items()},
            obs_every,
        )
        if "ID" in queries
        else []
    )
    figs += [p for p in (reliability_figure(results, out_dir),) if p]
    for ts, c in cold.items():
        results[ts]["cold"] = c
    md = table1_markdown(results) + "\n" + by_obs_markdown(results) + "\n" + by_obs_markdown(cold, COLD_OBS)
    if decision_quantiles is not None:
        md += "\n" + decision_markdown({ts: r.get("decision") or {} for ts, r in results.items()})
    (out_dir / "table1.md").write_text(md)
    (out_dir / "prediction.json").write_text(json.dumps({"results": results, "figures": figs}, indent=2))
    return results


def run_prediction_experiment(settings: PredictionSettings, out_dir) -> dict:
    """The prediction benchmark (``experiment=prediction``) of ``settings`` into ``out_dir``: FM and WLS from their
    predictor configs, on the settings' bank (else the shipped one)."""
    bank = load_bank(settings.bank_path or default_bank_path())
    extra = tuple((label, predictor_from(spec, bank.path)) for label, spec in settings.extra)
    return run_prediction_benchmark(
        bank,
        predictor_from(settings.fm, bank.path),
        predictor_from(settings.wls),
        bank.family_params,
        Path(out_dir),
        n_ranks=settings.n_ranks,
        obs_every=settings.obs_every,
        seed=settings.seed,
        decision_quantiles=settings.decision_quantiles,
        extra=extra,
    )
