"""Evaluate one MARA across a suite of clusters: each setting is one ``python -m mara.evaluate`` run under ``--out``
(resumable: finished methods are kept), on identical episodes for every method of a setting (evaluation roots 0–4
unless ``--roots``) at loads ``p·M/7`` (the paper's pressure per node) on M nodes; then the suite table,
``python -m mara.report suite <out> <settings>`` (mara/report/suite.py: per setting and load every method's success and
the learned method's paired difference to that setting's best non-learned method, the suite means,
``<out>/suite_summary.json`` and the figure ``<out>/suite_learned_vs_best.png``).

    python scripts/experiments/suite_eval.py --out outputs/suite_eval \\
        [--learned MARA-suite|MARA-nodes|MARA-suite-ppo] [--ckpts RUN0/best.ckpt,RUN1/best.ckpt,RUN2/best.ckpt]
        [--settings clusters|sizes] [--size-ckpts 12x16=A,B,C ...] [--methods Slack-QR,Slack-QR-q,...] [--rules-only]

The learned method (``--learned``, default MARA-suite) is evaluated from ``--ckpts`` (one per training seed), or
without it from its shipped policies (mara/data/checkpoints/mara_suite_zoo_seed*.ckpt, mara_nodes_zoo_seed*.ckpt,
mara_suite_ppo_zoo_seed*.ckpt).
Learned methods named in ``--methods`` too (MARA-suite beside MARA-nodes or MARA-suite-ppo) are compared, never taken
for the best non-learned method.

``--settings clusters``: the suite of docs/allocators.md (7 nodes: identical; speeds [2,2,1,1,1,1,1] switch cost 2;
[3,1,1,1,1,1,1] cost 1; [2,2,2,1,1,1,1] cost 3). ``sizes``: identical nodes at (M, K) = (3, 6), (5, 8), (12, 16),
none in the suite's training; ``--size-ckpts MxK=...`` adds a policy trained for that size as ``MARA-size``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from mara.report.__main__ import main as report
from mara.report.suite import LOADS, SETTINGS, folder

RULES = "FIFO,EDF,LARA,Slack-WLS,Slack-FM,Slack-FM-q,Slack-QR,Slack-QR-q,Slack-QR-displace"


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
    own = dict(x.split("=", 1) for x in a.size_ckpts)
    for name, s in SETTINGS[a.settings].items():
        d = Path(a.out) / folder(name)
        methods = ("" if a.rules_only else a.learned + ",") + a.methods
        evaluate(d, s, methods, a.ckpts, a.roots, a.episodes, a.learned)
        if name in own:  # the size's own policy, evaluated as MARA-suite in its own folder (reported as MARA-size)
            evaluate(d / "size_policy", s, "MARA-suite", own[name], a.roots, a.episodes)
    sys.exit(report(["suite", a.out, a.settings]))


if __name__ == "__main__":
    main()
