"""Issue 25 note: the least-slack rule with perfect estimates on the experiment=hetero episodes, and the
allocation gap (Clairvoyant bound − Slack with perfect estimates), paired by episode.

A private stand-in until the `truth` predictor / `Slack-Truth` method of another branch is merged: the simulator's
estimate at every refresh is the true remaining batches to the first ε crossing (the generation cap's remainder
when the curve never crosses), exactly what tests/test_lara.py's PerfectPredictor returns, read from the
simulator's own ``slot_need`` instead of matching the curve prefix. Same warm-up (4 observations) and count-down.

    python docs/notes/issue25_truth.py RESULTS_JSON [overrides ...]

RESULTS_JSON: a results.json of ``python -m mara.evaluate experiment=hetero ...`` with the same overrides (its
episodes are rebuilt here from the same protocol); prints mean success (%) per load and the paired gaps.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np
from hydra import compose, initialize_config_dir

from mara.allocators.slack import SlackRule
from mara.core.config import CONF_DIR
from mara.eval.runner import (
    build_episodes,
    load_bank_from_cfg,
    node_options,
    protocol_from_cfg,
)
from mara.sim.env import BatchedEnv, run_episodes


class TruthEnv(BatchedEnv):
    """Perfect remaining-batch estimates at every predictor refresh (the refresh schedule is the simulator's)."""

    def _refresh_predictions(self, new_obs):
        er, ks = np.nonzero(new_obs)
        s = self.slot_s[er, ks]
        need, cap = self.slot_need[er, ks], self.slot_cap[er, ks]
        est = np.where(need <= cap, np.maximum(need - s, 0), np.maximum(cap - s, 0)).astype(np.float64)
        self.slot_pred[er, ks] = est
        self.slot_pred_lo[er, ks] = est
        self.slot_pred_hi[er, ks] = est
        self.slot_pred_s[er, ks] = s


def main(results_json: str, overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("evaluate", overrides=["experiment=hetero", *overrides])
    protocol = protocol_from_cfg(cfg)
    bank = load_bank_from_cfg(cfg)
    ep = build_episodes(cfg, bank, protocol)
    sim = cfg.sim
    env = TruthEnv(ep, bank, int(sim.nodes), int(sim.max_active), int(sim.obs_every), predictor=object(), **node_options(sim))
    truth = run_episodes(env, SlackRule(name="Slack-Truth*"))["success_rate"]
    rows = json.loads(open(results_json).read())["rows"]
    by = defaultdict(dict)  # (task_set, load, root, episode) -> method -> success rate
    for r in rows:
        by[(r["task_set"], r["load"], r["root"], r["episode"])][r["method"]] = r["success_rate"]
    methods = sorted({r["method"] for r in rows})
    keys = [(ep.task_set[e], float(ep.load[e]), int(ep.root[e]), int(ep.episode[e])) for e in range(ep.E)]
    missing = [k for k in keys if k not in by]
    if missing:
        sys.exit(f"{len(missing)} episodes of this protocol are not in {results_json} (same overrides?)")
    loads = sorted({k[1] for k in keys})
    print("mean success (%) per load, Slack-Truth* = Slack with perfect estimates (this script)")
    print("| method | " + " | ".join(f"p = {p:g}" for p in loads) + " |")
    print("|---|" + "---|" * len(loads))
    table = {m: np.array([by[k].get(m, np.nan) for k in keys], dtype=float) for m in methods}
    table["Slack-Truth*"] = np.asarray(truth, dtype=float)
    L = np.array([k[1] for k in keys])
    for m, v in table.items():
        print(f"| {m} | " + " | ".join(f"{100 * np.nanmean(v[L == p]):.2f}" for p in loads) + " |")
    proven = np.array([next((r.get("optimal") for r in rows if r["method"] == "Clairvoyant" and
                             (r["task_set"], r["load"], r["root"], r["episode"]) == k), None) is True for k in keys])
    if proven.any():
        print("\nClairvoyant solved to proven optimality (switch costs relaxed): "
              + ", ".join(f"p = {p:g}: {int(proven[L == p].sum())}/{int((L == p).sum())}" for p in loads))
        d = 100 * (table["Clairvoyant"] - table["Slack-Truth*"])
        print("Clairvoyant − Slack-Truth* on those episodes only: "
              + ", ".join(f"p = {p:g}: {d[(L == p) & proven].mean():+.2f}" for p in loads if ((L == p) & proven).any()))
    print("\npaired differences (points), mean ± standard error over episodes")
    pairs = [("Clairvoyant", "Slack-Truth*")] + [("Slack-Truth*", m) for m in ("FIFO", "EDF", "Slack-FM", "Slack-WLS", "LARA", "LARA-FM")]
    for a, b in pairs:
        if a not in table or b not in table:
            continue
        cells = []
        for p in loads:
            d = 100 * (table[a][L == p] - table[b][L == p])
            d = d[np.isfinite(d)]
            cells.append(f"{d.mean():+.2f} ± {d.std(ddof=1) / np.sqrt(len(d)):.2f}")
        print(f"| {a} − {b} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
