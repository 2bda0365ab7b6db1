"""The suite table: one MARA across a suite of clusters. Per setting and load, every method's success and each
learned method's paired difference to that setting's best non-learned method (± standard error over episodes,
learned methods averaged over training seeds first), then the suite means (settings × loads).

The settings are the suite's (``clusters``: docs/allocators.md's 7-node suite; ``sizes``: identical nodes at sizes
none of the suite's training saw), each one evaluation run in ``<out>/<folder>`` (``folder``), a size's own policy in
``<out>/<folder>/size_policy`` (reported as ``MARA-size``).
"""

from __future__ import annotations

import numpy as np

from mara.report.decomposition import episode_success, paired_difference

CLUSTERS = {
    "identical": {"nodes": 7, "max_active": 10, "node_speed": None, "switch_cost": 0},
    "2,2,1,1,1,1,1 c2": {"nodes": 7, "max_active": 10, "node_speed": [2, 2, 1, 1, 1, 1, 1], "switch_cost": 2},
    "3,1,1,1,1,1,1 c1": {"nodes": 7, "max_active": 10, "node_speed": [3, 1, 1, 1, 1, 1, 1], "switch_cost": 1},
    "2,2,2,1,1,1,1 c3": {"nodes": 7, "max_active": 10, "node_speed": [2, 2, 2, 1, 1, 1, 1], "switch_cost": 3},
}
SIZES = {
    f"{m}x{k}": {"nodes": m, "max_active": k, "node_speed": None, "switch_cost": 0}
    for m, k in ((3, 6), (5, 8), (12, 16))
}
SETTINGS = {"clusters": CLUSTERS, "sizes": SIZES}
#: the paper's pressure per node; a setting of M nodes runs at p·M/7
LOADS = (0.04, 0.05, 0.06, 0.07)
LEARNED = ("MARA-suite", "MARA-nodes", "MARA-suite-ppo", "MARA-size")


def folder(name: str) -> str:
    """The run folder of a setting under the suite's output folder."""
    return name.replace(",", "").replace(" ", "_")


def _pair_line(label: str, per: dict, a: str, b: str, loads) -> str:
    return (
        f"| **{label}** | "
        + " | ".join("{diff:+.2f} ± {se:.2f}".format(**paired_difference(per[p][a], per[p][b])) for p in loads)
        + " |"
    )


def setting_table(name: str, rows: list[dict]) -> tuple[str, dict]:
    """(one setting's markdown table, {load: {"best", "best_mean", "rules", <learned>: paired difference, ...}})."""
    loads = sorted({float(r["load"]) for r in rows})
    methods = sorted({r["method"] for r in rows}, key=lambda m: (m in LEARNED, m))
    lines = [
        f"\n### {name}\n\n| method | " + " | ".join(f"p = {p:g}" for p in loads) + " |\n|---|" + "---:|" * len(loads)
    ]
    per = {p: episode_success(rows, p) for p in loads}
    for m in methods:
        lines.append(
            f"| {m} | "
            + " | ".join(f"{np.mean(list(per[p][m].values())):.2f}" if m in per[p] else "–" for p in loads)
            + " |"
        )
    out = {}
    for p in loads:
        rules = {m: float(np.mean(list(v.values()))) for m, v in per[p].items() if m not in LEARNED}
        best = max(rules, key=rules.get)
        out[p] = {"best": best, "best_mean": rules[best], "rules": rules}
        for m in LEARNED:
            if m in per[p]:
                out[p][m] = paired_difference(per[p][m], per[p][best])
                out[p][m + "_mean"] = float(np.mean(list(per[p][m].values())))
    for m in LEARNED:
        if all(m in out[p] for p in loads):
            lines.append(
                f"| **{m} − best rule** | "
                + " | ".join(f"{out[p][m]['diff']:+.2f} ± {out[p][m]['se']:.2f} ({out[p]['best']})" for p in loads)
                + " |"
            )
    for m in ("MARA-nodes", "MARA-suite-ppo"):  # choosing nodes, or PPO after the imitation, against MARA-suite
        if m in methods and "MARA-suite" in methods:
            lines.append(_pair_line(f"{m} − MARA-suite", per, m, "MARA-suite", loads))
    if "MARA-size" in methods and "MARA-suite" in methods:
        lines.append(_pair_line("MARA-suite − MARA-size", per, "MARA-suite", "MARA-size", loads))
    return "\n".join(lines), out


def suite_means(summary: dict) -> str:
    """The suite means (methods evaluated in every setting × load) and each learned method against the best single
    non-learned method over the suite."""
    means: dict = {}
    for per in summary.values():
        for v in per.values():
            for m, x in v["rules"].items():
                means.setdefault(m, []).append(x)
            for m in LEARNED:
                if m + "_mean" in v:
                    means.setdefault(m, []).append(v[m + "_mean"])
    n = len(summary) * len(LOADS)
    lines = ["\n### Mean over the suite (settings × loads)\n\n| method | mean success (%) |\n|---|---:|"]
    full = {m: float(np.mean(xs)) for m, xs in means.items() if len(xs) == n}
    for m, x in sorted(full.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {m} | {x:.2f} |")
    rules = {m: x for m, x in full.items() if m not in LEARNED}
    for m in (m for m in LEARNED if m in full and rules):
        best = max(rules, key=rules.get)
        lines.append(
            f"\n{m} − the best single non-learned method ({best}) over the suite: {full[m] - rules[best]:+.2f}"
        )
    return "\n".join(lines)
