"""Each teacher rule (and the shipped network) of MARA's trace policy on the validation windows of its training
config: the yardstick for whether the network adds anything over the rule it imitates.

    python scripts/trace_mara_rules.py [checkpoint]     # default: the shipped mara/data/checkpoints/mara_trace.ckpt
"""

import sys

import numpy as np
import torch
from omegaconf import OmegaConf

from mara.curves.bank import default_bank_path, load_bank
from mara.mat.trace_train import episodes, trace_windows
from mara.predictors.factory import predictor_from
from mara.traces.policy import RULES, SHIPPED_TRACE_POLICY, TraceMARA, load_policy
from mara.train_settings import trace_policy_settings

torch.set_num_threads(1)
settings = trace_policy_settings(OmegaConf.load("conf/experiment/trace_mara.yaml"))
bank = load_bank(default_bank_path())
windows = [trace_windows(s, "val") for s in settings.val]
val = episodes(windows, bank, predictor_from(settings.predictor, bank.path), settings)
net = load_policy(sys.argv[1] if len(sys.argv) > 1 else SHIPPED_TRACE_POLICY)
for name, make in [(r, lambda r=r: TraceMARA(rule=r)) for r in RULES] + [("network", lambda: TraceMARA(net=net))]:
    met = [ep.play(make()) for ep in val]
    print(f"{name}: mean {np.mean(met):.4f} | " + " | ".join(f"{ep.name} {m:.3f}" for ep, m in zip(val, met)))
