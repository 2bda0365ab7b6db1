"""Each teacher rule (and the shipped network) of MARA's trace policy on the validation windows of its training
config: the yardstick for whether the network adds anything over the rule it imitates, and for the allocator's
probe and reservation settings (per job-size class as well).

    python scripts/experiments/trace_mara_rules.py [checkpoint] [--probe N ...] [--reserve N ...] \
        [--only edf,network] [--later]
        # default: the shipped mara/data/checkpoints/mara_trace.ckpt, the allocator's default settings

``--later``: instead of the validation weeks, a week from day 35 of clusters 02, 03 and 05 (after every training
day, outside the evaluation protocol's first 32 days; printed as ``train0``): windows with many 8-GPU jobs, which
the validation weeks nearly lack (12 jobs of 5-15 GPUs in the three weeks), to see the allocator act on them.
"""

import argparse

import numpy as np
import torch
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank
from mara.mat.trace_settings import TraceWindowSpec
from mara.mat.trace_train import episodes, trace_windows
from mara.predictors.factory import predictor_from
from mara.traces.policy import RULES, SHIPPED_TRACE_POLICY, TraceMARA, load_policy
from mara.traces.replay import DONE
from mara.traces.schema import SIZE_CLASSES, size_class
from mara.train_settings import trace_policy_settings

ap = argparse.ArgumentParser()
ap.add_argument("ckpt", nargs="?", default=str(SHIPPED_TRACE_POLICY))
ap.add_argument("--reserve", type=int, nargs="*", default=[None], help="reservations per decision (default: RESERVE)")
ap.add_argument("--probe", type=int, nargs="*", default=[None], help="probe GPUs per decision (default: PROBE)")
ap.add_argument("--only", default="", help="comma-separated rules and/or network (default: all)")
ap.add_argument("--later", action="store_true", help="the weeks from day 35 of clusters 02, 03, 05")
a = ap.parse_args()
torch.set_num_threads(1)
settings = trace_policy_settings(OmegaConf.load("conf/experiment/trace_mara.yaml"))
specs = settings.val
if a.later:
    C = "data_cache/itp-traces/elasticflow"
    specs = tuple(TraceWindowSpec(f"{C}/cluster{c}.csv", "n64g8", 35, 7, 1, 1) for c in ("02", "03", "05"))
bank = load_bank(default_bank_path())
windows = [trace_windows(s, "val") for s in specs]
val = episodes(windows, bank, predictor_from(settings.predictor, bank.path), settings)
net = load_policy(a.ckpt)
names = [n for n in (*RULES, "network") if not a.only or n in a.only.split(",")]
for reserve, probe, name in [(r, p, n) for r in a.reserve for p in a.probe for n in names]:
    if True:
        met, by_class = [], {c: [] for c in SIZE_CLASSES}
        for ep in val:
            kw = {"reserve": reserve, "probe": probe}
            sched = TraceMARA(net=net, **kw) if name == "network" else TraceMARA(rule=name, **kw)
            met.append(ep.play(sched))
            st = ep.view.state  # the true job state the replay ran on
            ok = (st.status == DONE) & (st.finish <= st.ddl)
            cls = size_class(ep.jobs.num_gpu)
            for k, c in enumerate(SIZE_CLASSES):
                sel = ep.scored & (cls == k)
                if sel.any():
                    by_class[c].append(ok[sel].mean())
        sizes = " ".join(f"{c}:{np.mean(v):.3f}" for c, v in by_class.items() if v)
        worst = min(np.mean(v) for v in by_class.values() if v)
        print(
            f"reserve={sched.reserve} probe={sched.probe} {name}: mean {np.mean(met):.4f} | "
            + " | ".join(f"{ep.name} {m:.3f}" for ep, m in zip(val, met))
            + f" | by size (mean over windows) {sizes} worst {worst:.3f}",
            flush=True,
        )
