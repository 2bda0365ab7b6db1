"""Leave-one-family-out (LOFO) prediction benchmark: how FM generalises to a task family it never saw.

For each held-out ID family F: train the flow predictor on the other families' fm_train curves, validate (early
stopping, conformal band offset) on their fm_val curves, and measure FM and WLS on F's ``test_splits`` curves
(fm_val + pool) with the Table-1 queries (ε and budget from the bank's family table). Per fold: MAE, budget
accuracy, q10–q90 coverage and band width; plus which families reached training or validation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mara.curves.bank import CurveBank
from mara.curves.families import ID_FAMILIES
from mara.eval.prediction import build_queries, concat_queries, evaluate_predictor
from mara.eval.settings import LofoSettings, bank_at
from mara.predictors.factory import predictor_from
from mara.predictors.fit_settings import FlowFitSettings
from mara.predictors.fm.data import CurveDataModule
from mara.predictors.fm.train import compute_novelty, fit_flow


def lofo_families(bank: CurveBank, families=None) -> list[str]:
    """The families to hold out in turn: ``families`` or every ID family with fm_train and fm_val curves."""
    fams = list(families) if families else [f for f in ID_FAMILIES if f in bank.families]
    return [f for f in fams if len(bank.rows(f, "fm_train")) and len(bank.rows(f, "fm_val"))]


def fold_queries(
    bank: CurveBank, held_out: str, splits, family_params: dict, n_ranks: int, obs_every: int, seed: int
) -> dict:
    """Table-1 queries on the held-out family's curves of ``splits``."""
    return concat_queries(
        [
            build_queries(bank, [held_out], s, family_params, n_ranks, obs_every, seed)
            for s in splits
            if len(bank.rows(held_out, s))
        ]
    )


def lofo_markdown(folds: dict) -> str:
    lines = [
        "| Held-out family | queries | FM MAE | WLS MAE | FM/WLS | FM acc. (%) | WLS acc. (%) | FM q10–q90 cov. "
        "(%) | WLS cov. (%) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fam, r in folds.items():
        fm, wls = r["FM"], r["WLS"]
        lines.append(
            f"| {fam} | {fm['n_queries']} | {fm['mae']:.1f} | {wls['mae']:.1f} | "
            f"{fm['mae'] / max(wls['mae'], 1e-9):.2f} | "
            f"{100 * fm['budget_acc']:.1f} | {100 * wls['budget_acc']:.1f} | {100 * fm['coverage']:.1f} | "
            f"{100 * wls['coverage']:.1f} |"
        )
    s = lofo_summary(folds)
    lines.append(
        f"| **mean** | | **{s['fm_mae']:.1f}** | **{s['wls_mae']:.1f}** | "
        f"{s['fm_mae'] / max(s['wls_mae'], 1e-9):.2f} | "
        f"{100 * s['fm_acc']:.1f} | {100 * s['wls_acc']:.1f} | {100 * s['fm_cov']:.1f} | {100 * s['wls_cov']:.1f} |"
    )
    return "\n".join(lines) + f"\n\nFM beats WLS on MAE for {s['fm_wins']}/{s['n_folds']} held-out families.\n"


def lofo_summary(folds: dict) -> dict:
    """Means over folds (each family weighs the same) and the number of folds where FM's MAE < WLS's."""
    get = lambda m, k: float(np.mean([r[m][k] for r in folds.values()]))
    return {
        "n_folds": len(folds),
        "fm_wins": int(sum(r["FM"]["mae"] < r["WLS"]["mae"] for r in folds.values())),
        "fm_mae": get("FM", "mae"),
        "wls_mae": get("WLS", "mae"),
        "fm_acc": get("FM", "budget_acc"),
        "wls_acc": get("WLS", "budget_acc"),
        "fm_cov": get("FM", "coverage"),
        "wls_cov": get("WLS", "coverage"),
    }


def _train_fold(bank, fm_cfg, held, fams, fold_dir, seed, max_epochs, trainer_extra, log) -> tuple[Path, dict]:
    """The FM of the fold that holds ``held`` out, trained on the other families on the CPU: (its checkpoint, its
    training record); raises when the held-out family reached training or validation."""
    from omegaconf import OmegaConf

    others = [f for f in fams if f != held]
    trainer = {
        "max_epochs": int(max_epochs),
        "accelerator": "cpu",
        "devices": 1,
        "enable_progress_bar": False,
        **(trainer_extra or {}),
    }
    fit = FlowFitSettings.from_config(OmegaConf.to_container(fm_cfg, resolve=True))
    res = fit_flow(bank, fit, trainer, fold_dir, seed=seed, families=others)
    if held in res["seen_families"]:
        raise RuntimeError(f"LOFO fold {held}: the held-out family reached training or validation")
    log(f"fold {held}: trained on {len(others)} families in {res['wall_s']:.0f} s ({res['epochs']} epochs)")
    return Path(res["fm_ckpt"]), {k: res[k] for k in ("wall_s", "epochs", "seen_families", "band_offset") if k in res}


def _fold_predictor(bank, fm_cfg, ckpt, trained_on: list[str], seed: int):
    """The fold's FM predictor from its checkpoint; a checkpoint without a novelty reference gets one from the data of
    the families it was trained on."""
    from omegaconf import OmegaConf

    fm = predictor_from(OmegaConf.merge(fm_cfg, {"ckpt_path": str(ckpt)}))
    if fm.novelty is None:
        dm = CurveDataModule(
            bank,
            seed=seed,
            families=trained_on,
            **OmegaConf.to_container(fm_cfg.data, resolve=True) | {"feature_set": fm.net.feature_set},
        )
        fm.novelty = compute_novelty(fm.net, dm)
    return fm


def run_lofo(bank: CurveBank, settings: LofoSettings, out_dir, trainer_extra: dict | None = None, log=print) -> dict:
    """Train (or reuse: ``settings.reuse_dir``) one FM per held-out family, evaluate FM and WLS on it; writes lofo.md
    and lofo.json. ``trainer_extra``: Lightning Trainer options over the folds' CPU defaults."""
    import torch
    from omegaconf import OmegaConf

    seed, n_ranks, obs_every = settings.seed, settings.n_ranks, settings.obs_every
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fams = lofo_families(bank, settings.families)
    if len(fams) < 2:
        raise ValueError(
            f"curve bank {bank.path}: leave-one-family-out needs ≥ 2 ID families with fm_train and fm_val curves"
        )
    fm_cfg = OmegaConf.create(OmegaConf.to_container(settings.fm, resolve=True))
    fm_cfg.data.train_examples = int(settings.train_examples)
    fm_cfg.train.figure_every_n_epochs = 0
    wls = predictor_from(settings.wls)
    folds, training = {}, {}
    for held in fams:
        fold_dir = out_dir / f"fold_{held}"
        ckpt = Path(settings.reuse_dir) / f"fold_{held}" / "fm.ckpt" if settings.reuse_dir else None
        if ckpt is None:
            ckpt, training[held] = _train_fold(
                bank, fm_cfg, held, fams, fold_dir, seed, settings.max_epochs, trainer_extra, log
            )
        torch.set_num_threads(1)
        fm = _fold_predictor(bank, fm_cfg, ckpt, [f for f in fams if f != held], seed)
        q = fold_queries(bank, held, settings.test_splits, bank.family_params, n_ranks, obs_every, seed)
        folds[held] = {
            name: evaluate_predictor(p, bank, q, obs_every, n_ranks)[0] for name, p in (("FM", fm), ("WLS", wls))
        }
        folds[held]["test_families"] = sorted(set(bank.family[q["rows"]].tolist()))
        log(f"fold {held}: FM MAE {folds[held]['FM']['mae']:.1f} vs WLS {folds[held]['WLS']['mae']:.1f}")
    md = lofo_markdown(folds)
    (out_dir / "lofo.md").write_text(md)
    (out_dir / "lofo.json").write_text(
        json.dumps(
            {
                "folds": folds,
                "training": training,
                "summary": lofo_summary(folds),
                "fm_cfg": OmegaConf.to_container(fm_cfg),
            },
            indent=1,
        )
    )
    return {"folds": folds, "training": training, "summary": lofo_summary(folds), "markdown": md}


def run_lofo_experiment(settings: LofoSettings, out: Path) -> dict:
    """The LOFO benchmark (``experiment=prediction_lofo``) of ``settings`` into ``out``."""
    res = run_lofo(bank_at(settings.bank_path), settings, out)
    print("# Leave-one-family-out prediction\n\n" + res["markdown"])
    print(f"wrote {out / 'lofo.md'} and {out / 'lofo.json'}")
    return res
