"""How well a predictor tells target-loss trace jobs' remaining iterations from their loss prefixes.

    python -m mara.traces.target_prediction <trace csv> [<trace csv> ...] [--first N] [--predictors qr,wls]

For every job (the first N of each trace, target-loss jobs of seed 0 as mara/traces/target_loss.py makes them) and
every observed fraction f of its true count N (``FRACTIONS``), the scheduler's view after k = f N iterations is its
first floor(k / s) bank batches of loss (s read as ElasticFlow-predicted and Slack-QR-q read it: declared count /
past runs' count); the predictor's band of remaining batches, times s, is the estimate of the N − k iterations left.
Before ``min_obs`` batches the job has only its prior (the count of half its model's past runs, as the rules use):
those are counted apart (``cold``) and scored on that prior. Per predictor, model and fraction: the mean absolute
error as a share of the job's true count (|ê − e| / N), the median relative error |ê − e| / e of the median, and
the share of jobs whose true remaining iterations lie in the band [lo, hi] (q10–q90 for the decision head).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from mara.core.config import ConfigError
from mara.core.registry import trace_predictors
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.estimates import Estimates
from mara.traces.schema import SCHEMAS, Trace, load_trace
from mara.traces.target_loss import declared_batches, target_loss_jobs

FRACTIONS = (0.1, 0.25, 0.5, 0.75)
PRIOR_SHARE = 0.5  # the rules' prior before min_obs: the count of half the model's past runs


def read_trace_jobs(path) -> Trace:
    """The trace at ``path`` if its jobs can be made target-loss jobs (elasticflow schema), else a one-line
    ConfigError (missing or malformed file, or the raw schema without model and iteration count)."""
    try:
        tr = load_trace(path)
    except ConfigError:
        raise
    except (OSError, ValueError) as e:  # unreadable, or a value the schema check did not name
        raise ConfigError(f"{path}: {type(e).__name__}: {e}") from None
    if not SCHEMAS[tr.schema].per_model:
        raise ConfigError(f"{path}: target-loss jobs need the elasticflow schema (model, num_iteration)")
    return tr


def band_metrics(est: np.ndarray, true_left: np.ndarray, true_total: np.ndarray) -> dict:
    """Errors of a band ``est [n, 3]`` (lo, median, hi remaining iterations) against ``true_left [n]`` of jobs of
    ``true_total [n]`` iterations: MAE / N, median |ê − e| / e, coverage of [lo, hi]."""
    med = est[:, 1]
    return {
        "n": int(len(med)),
        "mae_of_n": float(np.mean(np.abs(med - true_left) / true_total)),
        "median_rel": float(np.median(np.abs(med - true_left) / np.maximum(true_left, 1.0))),
        "coverage": float(np.mean((est[:, 0] <= true_left) & (true_left <= est[:, 2]))),
    }


def job_bands(estimates: Estimates, tl, bank, frac: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(band [J, 3] of remaining iterations, true remaining [J], warm [J] bool) of every job after a share ``frac``
    of its true count; cold jobs get their prior (all three columns)."""

    done = np.floor(frac * tl.true)
    scale = tl.seen_scale
    seen = np.floor(done / scale).astype(np.int64)
    warm = seen >= estimates.min_obs
    prior = scale * np.array([declared_batches(bank, f, e, PRIOR_SHARE) for f, e in zip(tl.family, tl.target)])
    est = np.repeat(np.maximum(prior - done, 1.0)[:, None], 3, axis=1)
    w = np.flatnonzero(warm)
    if w.size:
        band = estimates.bank_prefix_band(bank, tl.row[w], seen[w], tl.target[w], tl.family[w])
        est[w] = np.maximum(band * scale[w, None], 1.0)
    return est, tl.true - done, warm


def evaluate(paths, first: int, predictors) -> dict:
    """{predictor: {fraction: {model or 'all': metrics (warm jobs), 'cold': share cold, 'cold_metrics': ...}}}."""

    bank = load_bank(default_bank_path())
    jobs = []
    for p in paths:
        tr = load_trace(p)
        tr = tr.take(slice(0, min(first, tr.n_jobs)))
        jobs.append((tr.model.astype(str), target_loss_jobs(tr.job_id, tr.model, tr.iterations, bank, 0)))
    out = {}
    for name in predictors:
        pred = Estimates.named(name, bank.path)
        out[name] = {}
        for f in FRACTIONS:
            parts = [job_bands(pred, tl, bank, f) + (m, tl.true) for m, tl in jobs]
            est = np.concatenate([p[0] for p in parts])
            left = np.concatenate([p[1] for p in parts])
            warm = np.concatenate([p[2] for p in parts])
            model = np.concatenate([p[3] for p in parts])
            total = np.concatenate([p[4] for p in parts])
            row = {"cold": float(1 - warm.mean())}
            if warm.any():
                row["all"] = band_metrics(est[warm], left[warm], total[warm])
            for m in sorted(set(model)):
                sel = warm & (model == m)
                if sel.any():
                    row[m] = band_metrics(est[sel], left[sel], total[sel])
            if (~warm).any():
                row["cold_metrics"] = band_metrics(est[~warm], left[~warm], total[~warm])
            out[name][f] = row
    return out


def markdown(res: dict) -> str:
    """One table per predictor: rows model, columns observed fraction; cells MAE/N · median rel. · coverage."""
    lines = []
    for name, by_f in res.items():
        models = sorted({k for row in by_f.values() for k in row if k not in ("cold", "cold_metrics", "all")})
        lines += [
            f"**{name}** (warm jobs; cell: MAE / N · median relative error · q10–q90 coverage; n)",
            "",
            "| model | " + " | ".join(f"{int(f * 100)} %" for f in by_f) + " |",
            "|---|" + "---|" * len(by_f),
        ]
        for m in ["all"] + models:
            cells = []
            for row in by_f.values():
                x = row.get(m)
                cells.append(
                    "-"
                    if x is None
                    else f"{x['mae_of_n']:.2f} · {x['median_rel']:.2f} · {x['coverage']:.2f} ({x['n']})"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        cold = []
        for row in by_f.values():
            c = row.get("cold_metrics")
            cold.append(
                f"{row['cold']:.2f}" + ("" if c is None else f" (prior: {c['mae_of_n']:.2f} · {c['median_rel']:.2f})")
            )
        lines += ["| share cold (prior) | " + " | ".join(cold) + " |", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--first", type=int, default=300)
    ap.add_argument("--predictors", default=",".join(trace_predictors()))
    a = ap.parse_args(argv)
    preds = a.predictors.split(",")
    known = trace_predictors()  # the kinds registered with traces: true
    bad = [p for p in preds if p not in known]
    if bad or a.first < 1:
        print(
            f"--predictors must be among {', '.join(known)} and --first >= 1, got {a.predictors!r}, {a.first}",
            file=sys.stderr,
        )
        return 2

    for p in a.traces:
        try:
            read_trace_jobs(p)
        except ConfigError as e:  # a missing or malformed trace: one line
            print(e, file=sys.stderr)
            return 2
    print(markdown(evaluate(a.traces, a.first, preds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
