"""Issue 22 checks used in docs/notes/issue22.md (run from a checkout with PYTHONPATH=<checkout>, OMP_NUM_THREADS=1).

  python docs/notes/issue22_checks.py actions OUT.npz   # shipped MARA checkpoints acting deterministically, every step
  python docs/notes/issue22_checks.py rules             # Slack-FM / EDF / FIFO successes and raw FM estimates
  python docs/notes/issue22_checks.py train OUT_DIR [overrides...]   # train_policy on conf/train.yaml (e.g. mat=band predictor=fm)

Run `actions`/`rules` once in a checkout of the branch's base (`git archive <base> mara conf | tar -x -C /tmp/base`,
PYTHONPATH=/tmp/base) and once in the branch; the outputs must be identical (they were, see the notes).
"""
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def _bank_and_fm():
    from mara.curves.bank import default_bank_path, load_bank
    from mara.predictors.factory import predictor_from

    bank = load_bank(default_bank_path())
    return bank, predictor_from("fm", bank.path)


def actions(out: str) -> None:
    from mara.mat.allocator import MATAllocator
    from mara.sim.env import BatchedEnv
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    torch.set_num_threads(1)
    bank, fm = _bank_and_fm()
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 777, 6)
    res = {}
    ckpts = Path(__file__).resolve().parents[2] / "mara" / "data" / "checkpoints"
    for ck in sorted(glob.glob(str(ckpts / "mara_*.ckpt"))):
        sim = torch.load(ck, map_location="cpu", weights_only=False)["hyper_parameters"]["sim"]
        alloc = MATAllocator(ck)
        env = BatchedEnv(ep, bank, n_nodes=sim["n_nodes"], max_active=sim["max_active"], obs_every=sim["obs_every"], predictor=fm)
        obs, acts = env.reset(), []
        while not env.done.all():
            a = alloc.act(obs)
            acts.append(a)
            obs, *_ = env.step(a)
        res[Path(ck).name] = np.stack(acts)
        print(Path(ck).name, float(env.metrics()["success_rate"].mean()))
    np.savez(out, **res)


def rules() -> None:
    from mara.allocators.rules import EDF, FIFO
    from mara.allocators.slack import SlackRule
    from mara.sim.env import BatchedEnv, run_episodes
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    bank, fm = _bank_and_fm()
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["RL_OOD"], 0.06, 3, 8)
    for rule in (SlackRule, EDF, FIFO):
        env = BatchedEnv(ep, bank, predictor=fm)
        m = run_episodes(env, rule())
        print(rule.__name__, m["succeeded"].tolist(), float(np.abs(env.slot_pred).sum()))


def train(out: str, *overrides: str) -> None:
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR
    from mara.mat.train import train_policy

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("train", overrides=[f"paths.output_dir={out}", *overrides])
    t = time.time()
    r = train_policy(cfg)
    r.pop("history", None)
    print(json.dumps({k: v for k, v in r.items() if k != "imitation"}, indent=1, default=str))
    print("imitation", json.dumps((r.get("imitation") or {}).get("rounds"), default=str))
    print("wall", time.time() - t)


if __name__ == "__main__":
    {"actions": actions, "rules": rules, "train": train}[sys.argv[1]](*sys.argv[2:])
