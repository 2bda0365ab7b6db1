"""Success, switches and decision time of rule methods on the same episodes, with ms per episode-decision for the
placement search (``PlanRule.timing``): for choosing options on validation roots and timing the planners.

    python scripts/experiments/plan_timing.py METHOD[,METHOD...] [overrides ...]

e.g. ``python scripts/experiments/plan_timing.py Slack-QR,Slack-QR-displace,Plan-QR experiment=hetero
'eval.roots=[100,101]' 'sim.loads=[0.05]'``. Each method runs with its own predictor; the first is the
baseline of the paired differences (± standard error over episodes).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from hydra import compose, initialize_config_dir

from mara.core.config import CONF_DIR, build_allocators, load_method_cfg
from mara.eval.runner import build_episodes, run_policy
from mara.eval.settings import bank_at, evaluation_settings
from mara.predictors.factory import predictor_from


def main(methods: list[str], overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("evaluate", overrides=overrides)
    run = evaluation_settings(cfg)
    bank = bank_at(run.bank_path)
    ep = build_episodes(run.workload, bank, run.protocol, run.sim.steps)
    loads = sorted(set(np.round(ep.load, 6).tolist()))
    predictors, base = {}, None
    print(
        "| method | " + " | ".join(f"p = {p:g} (paired)" for p in loads) + " | switches / episode | s | ms / decision |"
    )
    print("|---|" + "---:|" * (len(loads) + 3))
    for name in methods:
        mcfg = load_method_cfg(name)
        [(_, alloc)] = build_allocators(mcfg)
        pred = predictor_from(mcfg.get("predictor"), bank.path, configured=run.predictors, built=predictors)
        t0 = time.perf_counter()
        m = run_policy(alloc, ep, bank, run.sim, pred)
        wall = time.perf_counter() - t0
        s = 100 * m["success_rate"]
        base = s if base is None else base
        cells = []
        for p in loads:
            sel = np.isclose(ep.load, p)
            d = (s - base)[sel]
            cells.append(f"{s[sel].mean():.2f} ({d.mean():+.2f} ± {d.std(ddof=1) / np.sqrt(len(d)):.2f})")
        tm = getattr(alloc, "timing", None)
        ms = f"{1000 * tm['seconds'] / max(tm['decisions'], 1):.2f}" if tm else "–"
        sw = f"{m['switches'].mean():.1f}" if "switches" in m else "–"
        print(f"| {name} | " + " | ".join(cells) + f" | {sw} | {wall:.0f} | {ms} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/experiments/plan_timing.py METHOD[,METHOD...] [overrides ...]")
    main(sys.argv[1].split(","), sys.argv[2:])
