"""``python -m mara.evaluate experiment=prediction``: Table 1 and Figure 3 into the run folder's results."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from mara.curves.bank import shipped_bank_path
from mara.eval.decision_metrics import decision_markdown
from mara.eval.decision_points import decision_points
from mara.eval.prediction import COLD_OBS, by_obs_markdown, run_prediction_experiment, table1_markdown
from mara.eval.settings import EvaluationSettings, PredictionSettings, TraceJobSettings
from mara.traces.target_prediction import evaluate as evaluate_trace_jobs
from mara.traces.target_prediction import markdown as trace_jobs_markdown


def run_prediction(settings: PredictionSettings, run: EvaluationSettings | None, out: Path) -> dict:
    """Run the FM-vs-WLS prediction benchmark; merge it into results.json (``prediction``) and results.md.

    ``run``: the evaluation protocol the decision points roll policies on (None when they are off)."""

    if settings.bank_path:  # a shipped bank's name or a file
        settings = replace(settings, bank_path=str(shipped_bank_path(settings.bank_path)))
    results = run_prediction_experiment(settings, out)
    points = None
    if settings.decision_points is not None:
        points = decision_points(settings.decision_points, run)
    trace_jobs = None if settings.trace_jobs is None else trace_jobs_section(settings.trace_jobs)
    path = out / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {"schema": "mara.results/1", "rows": [], "summary": {}}
    data["prediction"] = results
    if points is not None:
        data["decision_points"] = points
    if trace_jobs is not None:
        data["trace_jobs"] = trace_jobs[0]
    path.write_text(json.dumps(data, indent=1))
    md = "# Remaining-resource prediction (Table 1)\n\n" + table1_markdown(results)
    md += (
        "\n## By number of observations\n\nPer query's observation count (queries in brackets): remaining-batch "
        "MAE / finish-before-the-deadline accuracy (%) / q10–q90 coverage of the true remaining batches (%).\n\n"
        + by_obs_markdown(results)
    )
    cold = {ts: r["cold"] for ts, r in results.items() if r.get("cold")}
    if cold:
        md += (
            "\n**Cold tasks** (1–3 observations, same curves and (ε, budget) draws; a predictor without a cold "
            "estimate answers the cap): MAE / finish accuracy (%) / q10–q90 coverage (%).\n\n"
            + by_obs_markdown(cold, COLD_OBS)
        )
    decisions = {ts: r.get("decision") for ts, r in results.items() if r.get("decision")}
    if decisions:
        md += (
            "\n## Decision-relevant metrics\n\nAt each query (s0 batches processed, budget B): "
            '"finishes within B if served from now on" predicted (s0 + estimate ≤ B) against the truth; accuracy '
            "overall and by number of observations (queries in brackets), the two error rates, and the Spearman rank "
            "correlation of predicted and true slack (B − s0 − remaining).\n\n" + decision_markdown(decisions)
        )
    if points is not None:
        meta = points["_meta"]
        md += (
            f"\n## The same decisions at the simulator's decision points\n\nEvery step, every warm task that could be "
            "served, while the policy runs (label: policy rolled, its own predictor scored on its own states): "
            "remaining "
            f"time τ = deadline − t (waiting included), truth = need − processed. Loads {meta['loads']}, roots "
            f"{meta['roots']}, {meta['n_episodes']} episodes.\n\n"
            + decision_markdown({f"{k} ({meta['policies'][k]})": v for k, v in points.items() if k != "_meta"})
        )
    if trace_jobs is not None:
        md += trace_jobs[1]
    md += "\n![Figure 3a](fig3a_trajectory.png)\n![Figure 3b](fig3b_mae_vs_rank.png)\n"
    if (out / "fig_calibration.png").exists():
        md += "![Band levels against the truth](fig_calibration.png)\n"
    (out / "results.md").write_text(md)
    _log_figures(out)
    print(md)
    print(f"wrote {path} and {out / 'results.md'}")
    return data


def trace_jobs_section(tj: TraceJobSettings) -> tuple[dict, str]:
    """(results.json's ``trace_jobs``, results.md's section): the predictors scored on the first ``tj.first`` jobs
    of ``tj.path`` as target-loss jobs, per model and observed fraction (mara/traces/target_prediction.py)."""
    res = evaluate_trace_jobs([tj.path], tj.first, tj.predictors)
    md = (
        f"\n## The predictor on trace jobs\n\nThe first {tj.first} jobs of {Path(tj.path).name} as target-loss jobs "
        "(seed 0, docs/traces-target-loss.md): after a share f of each job's true count N (columns), the band of its "
        "remaining iterations from the loss prefix the scheduler has seen, per model (rows).\n\n"
        + trace_jobs_markdown(res)
    )
    data = {
        "path": tj.path,
        "first": tj.first,
        "by_predictor": {k: {str(f): r for f, r in v.items()} for k, v in res.items()},
    }
    return data, md


def _log_figures(out: Path) -> None:
    """Figure 3 panels and Table 1 scalars to TensorBoard."""
    try:
        import matplotlib.image as mpimg
        from torch.utils.tensorboard import SummaryWriter
    except Exception:
        return
    with SummaryWriter(log_dir=str(out / "tb")) as w:
        for name in ("fig3a_trajectory", "fig3b_mae_vs_rank", "fig_calibration"):
            png = out / f"{name}.png"
            if png.exists():
                w.add_image(f"prediction/{name}", mpimg.imread(png)[..., :3], dataformats="HWC")
        data = json.loads((out / "results.json").read_text())["prediction"]
        for ts, per in data.items():
            for m, r in per.items():
                for k in ("mae", "budget_acc", "ms_per_prefix"):
                    if isinstance(r.get(k), (int, float)):
                        w.add_scalar(f"prediction/{ts}/{m}/{k}", r[k])
