"""Paired differences used in docs/notes/issue25_mat.md, from an evaluation's results.json:

    python docs/notes/issue25_mat_diffs.py <run>/results.json

Per load: MARA (mean over its seeds, and each seed) minus Slack-FM-q and minus the best non-learned method
(bounds and Slack-Truth excluded), Slack-Truth minus Slack-FM-q, and switches per episode."""
import json
import sys

import numpy as np

from mara.report.decomposition import NOT_RULES, episode_success, paired_difference

rows = json.load(open(sys.argv[1]))["rows"]
fmt = lambda d: f"{d['diff']:+.2f} ± {d['se']:.2f}"  # noqa: E731
for load in sorted({r["load"] for r in rows}):
    s = episode_success(rows, load)
    rules = {m: np.mean(list(v.values())) for m, v in s.items() if m not in NOT_RULES and m != "MARA"}
    best = max(rules, key=rules.get)
    seeds = sorted({r["train_seed"] for r in rows if r["method"] == "MARA"})
    per_seed = []
    for sd in seeds:
        one = episode_success([r for r in rows if r["method"] == "MARA" and r["train_seed"] == sd], load)["MARA"]
        per_seed.append(fmt(paired_difference(one, s["Slack-FM-q"])))
    sw = {m: np.mean([r["switches"] for r in rows if r["method"] == m and r["load"] == load]) for m in ("MARA", "Slack-FM-q", "Slack-FM")}
    print(f"p={load}: best rule {best}; MARA-best {fmt(paired_difference(s['MARA'], s[best]))}; "
          f"MARA-Slack-FM-q {fmt(paired_difference(s['MARA'], s['Slack-FM-q']))} (seeds {', '.join(per_seed)}); "
          f"Slack-Truth-Slack-FM-q {fmt(paired_difference(s['Slack-Truth'], s['Slack-FM-q']))}; "
          f"Slack-FM-Slack-FM-q {fmt(paired_difference(s['Slack-FM'], s['Slack-FM-q']))}; "
          f"switches/episode {', '.join(f'{m} {v:.1f}' for m, v in sw.items())}")
