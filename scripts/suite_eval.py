"""Evaluate one MARA across a suite of clusters and print, per setting and load, every method's success and the
learned method's paired difference to that setting's best non-learned method (± standard error over episodes,
learned methods averaged over training seeds first), then the suite means. Identical episodes for every method of a
setting (evaluation roots 0–4 unless ``--roots``); loads ``p·M/7`` (the paper's pressure per node) on M nodes.

    python scripts/suite_eval.py --out outputs/suite_eval [--learned MARA-suite|MARA-nodes|MARA-suite-ppo] \\
        [--ckpts RUN0/best.ckpt,RUN1/best.ckpt,RUN2/best.ckpt] [--settings clusters|sizes] [--size-ckpts
        12x16=A,B,C ...] [--methods Slack-QR,Slack-QR-q,...] [--rules-only]

The learned method (``--learned``, default MARA-suite) is evaluated from ``--ckpts`` (one per training seed), or
without it from its shipped policies (mara/data/checkpoints/mara_suite_zoo_seed*.ckpt, mara_nodes_zoo_seed*.ckpt,
mara_suite_ppo_zoo_seed*.ckpt).
Learned methods named in ``--methods`` too (MARA-suite beside MARA-nodes or MARA-suite-ppo) are compared, never taken
for the best non-learned method.

``--settings clusters``: the suite of docs/allocators.md (7 nodes: identical; speeds [2,2,1,1,1,1,1] switch cost 2;
[3,1,1,1,1,1,1] cost 1; [2,2,2,1,1,1,1] cost 3). ``sizes``: identical nodes at (M, K) = (3, 6), (5, 8), (12, 16),
none in the suite's training; ``--size-ckpts MxK=...`` adds a policy trained for that size as ``MARA-size``.
Each setting is one ``python -m mara.evaluate`` run under ``--out`` (resumable: finished methods are kept). Writes
``<out>/suite_summary.json`` and the figure ``<out>/suite_learned_vs_best.png`` (learned − best rule per setting).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from mara.report.decomposition import episode_success, paired_difference
from mara.report.suite_figure import suite_figure

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
LOADS = (0.04, 0.05, 0.06, 0.07)
RULES = "FIFO,EDF,LARA,Slack-WLS,Slack-FM,Slack-FM-q,Slack-QR,Slack-QR-q,Slack-QR-displace"
LEARNED = ("MARA-suite", "MARA-nodes", "MARA-suite-ppo", "MARA-size")


def checkpoints(paths: str) -> str:
    return "[" + ",".join(f"{{train_seed: {i}, ckpt_path: '{p}'}}" for i, p in enumerate(paths.split(","))) + "]"


def evaluate(
    out: Path, s: dict, methods: str, ckpts: str, roots: str, episodes: int, learned: str = "MARA-suite"
) -> Path:
    """One ``mara.evaluate`` run of ``methods`` (``learned`` on ``ckpts``) on setting ``s``; -> its results.json."""
    loads = [round(p * s["nodes"] / 7, 6) for p in LOADS]
    args = [
        sys.executable,
        "-m",
        "mara.evaluate",
        f"methods=[{methods}]",
        f"sim.nodes={s['nodes']}",
        f"sim.max_active={s['max_active']}",
        f"sim.loads=[{','.join(map(str, loads))}]",
        f"sim.switch_cost={s['switch_cost']}",
        f"eval.roots={roots}",
        f"eval.episodes={episodes}",
        "eval.tensorboard=false",
        f"hydra.run.dir={out}",
    ]
    if ckpts:
        args.append(f"+method_overrides={{{learned}: {{checkpoints: {checkpoints(ckpts)}}}}}")
    if s["node_speed"] is not None:
        args.append(f"sim.node_speed=[{','.join(map(str, s['node_speed']))}]")
    print("+", " ".join(args[1:]), flush=True)
    subprocess.run(args, check=True)
    return out / "results.json"


def table(name: str, rows: list[dict]) -> dict:
    """Print one setting's table; -> {load: (best rule, its mean, learned − best rule {diff, se})}."""
    loads = sorted({float(r["load"]) for r in rows})
    methods = sorted({r["method"] for r in rows}, key=lambda m: (m in LEARNED, m))
    print(f"\n### {name}\n\n| method | " + " | ".join(f"p = {p:g}" for p in loads) + " |\n|---|" + "---:|" * len(loads))
    per = {p: episode_success(rows, p) for p in loads}
    for m in methods:
        print(
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
            print(
                f"| **{m} − best rule** | "
                + " | ".join(f"{out[p][m]['diff']:+.2f} ± {out[p][m]['se']:.2f} ({out[p]['best']})" for p in loads)
                + " |"
            )
    for m in ("MARA-nodes", "MARA-suite-ppo"):  # choosing nodes, or PPO after the imitation, against MARA-suite
        if m in methods and "MARA-suite" in methods:
            print(
                f"| **{m} − MARA-suite** | "
                + " | ".join(
                    "{diff:+.2f} ± {se:.2f}".format(**paired_difference(per[p][m], per[p]["MARA-suite"])) for p in loads
                )
                + " |"
            )
    if "MARA-size" in methods and "MARA-suite" in methods:
        print(
            "| **MARA-suite − MARA-size** | "
            + " | ".join(
                "{diff:+.2f} ± {se:.2f}".format(**paired_difference(per[p]["MARA-suite"], per[p]["MARA-size"]))
                for p in loads
            )
            + " |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--learned", choices=("MARA-suite", "MARA-nodes", "MARA-suite-ppo"), default="MARA-suite")
    ap.add_argument(
        "--ckpts",
        default="",
        help="the learned method's policies, comma-separated (one per training seed); default: the shipped ones",
    )
    ap.add_argument("--rules-only", action="store_true", help="evaluate the rules, not the learned method")
    ap.add_argument("--settings", choices=("clusters", "sizes"), default="clusters")
    ap.add_argument("--size-ckpts", nargs="*", default=[], help="MxK=ckpt,ckpt,...: a policy trained for that size")
    ap.add_argument("--methods", default=RULES)
    ap.add_argument("--roots", default="5")
    ap.add_argument("--episodes", type=int, default=12)
    a = ap.parse_args()
    settings = CLUSTERS if a.settings == "clusters" else SIZES
    own = dict(x.split("=", 1) for x in a.size_ckpts)
    summary = {}
    for name, s in settings.items():
        d = Path(a.out) / name.replace(",", "").replace(" ", "_")
        methods = ("" if a.rules_only else a.learned + ",") + a.methods
        rows = json.loads(evaluate(d, s, methods, a.ckpts, a.roots, a.episodes, a.learned).read_text())["rows"]
        if name in own:  # the size's own policy, evaluated as MARA-suite in its own folder, renamed
            extra = json.loads(
                evaluate(d / "size_policy", s, "MARA-suite", own[name], a.roots, a.episodes).read_text()
            )["rows"]
            rows += [{**r, "method": "MARA-size"} for r in extra]
        summary[name] = table(name, rows)
    means = {}
    for per in summary.values():
        for v in per.values():
            for m, x in v["rules"].items():
                means.setdefault(m, []).append(x)
            for m in LEARNED:
                if m + "_mean" in v:
                    means.setdefault(m, []).append(v[m + "_mean"])
    n = len(summary) * len(LOADS)
    print("\n### Mean over the suite (settings × loads)\n\n| method | mean success (%) |\n|---|---:|")
    full = {m: float(np.mean(xs)) for m, xs in means.items() if len(xs) == n}
    for m, x in sorted(full.items(), key=lambda kv: -kv[1]):
        print(f"| {m} | {x:.2f} |")
    rules = {m: x for m, x in full.items() if m not in LEARNED}
    for m in (m for m in LEARNED if m in full and rules):
        best = max(rules, key=rules.get)
        print(f"\n{m} − the best single non-learned method ({best}) over the suite: {full[m] - rules[best]:+.2f}")
    (Path(a.out) / "suite_summary.json").write_text(json.dumps(summary, indent=1))
    fig = suite_figure(summary, Path(a.out) / "suite_learned_vs_best.png")
    if fig:
        print(f"\nfigure: {fig}")


if __name__ == "__main__":
    main()
