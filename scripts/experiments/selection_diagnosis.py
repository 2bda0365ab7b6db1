"""Which tasks the Clairvoyant's best schedule completes that the least-slack rule with perfect estimates does not,
and the other way round, on `experiment=hetero`'s nodes (speeds [2,2,1,1,1,1,1], switch cost 2):

    python scripts/experiments/selection_diagnosis.py [--load 0.06] [--root 1000] [--episodes 6] [--time-limit 10]

Per task set: the Clairvoyant's best schedule found and proven bound (switch costs relaxed), Slack-Truth-displace's
successes with switch costs, and per group of tasks (both complete them / only the Clairvoyant / only the rule /
neither, though alone on a fast node the task could finish) the median demand, time budget, demand / budget and
batches the rule served them. Use validation roots only (≥ 1000) when the answer guides a choice.
"""

from __future__ import annotations

import argparse

import numpy as np

from mara.allocators.slack import SlackRule
from mara.bounds.clairvoyant_k import clairvoyant_k_batch
from mara.curves.bank import default_bank_path, load_bank
from mara.eval.runner import chosen_tasks
from mara.predictors.baselines.truth import TruthPredictor
from mara.sim.env import BatchedEnv, TaskStatus
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

SPEED, COST = [2, 2, 1, 1, 1, 1, 1], 2


def served_batches(env: BatchedEnv, rule) -> np.ndarray:
    """Run ``rule`` to the end; -> batches each task was served [E, N]."""
    obs = env.reset()
    served = np.zeros(env.status.shape, dtype=np.int64)
    while not env.done.all():
        obs = env.step(rule.act(obs))[0]
        e, k = np.nonzero(env.slot_task >= 0)
        served[e, env.slot_task[e, k]] = env.slot_s[e, k]
    return served


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", type=float, default=0.06)
    ap.add_argument("--root", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--time-limit", type=float, default=10.0)
    a = ap.parse_args()
    bank = load_bank(default_bank_path())
    for ts in ("ID", "RL_OOD", "ViT_OOD"):
        ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS[ts], a.load, a.root, a.episodes)
        res = clairvoyant_k_batch(
            ep.arrival,
            ep.deadline,
            ep.need,
            ep.n_tasks,
            n_nodes=len(SPEED),
            max_active=10,
            node_speed=SPEED,
            time_limit_s=a.time_limit,
        )
        chosen = chosen_tasks(res, ep.N) & ep.valid
        env = BatchedEnv(ep, bank, predictor=TruthPredictor(), node_speed=SPEED, switch_cost=COST)
        served = served_batches(env, SlackRule(name="Slack-Truth-displace", displace=True))
        ok = (env.status == TaskStatus.SUCCEEDED) & ep.valid
        print(
            f"{ts}: Clairvoyant best found {sum(r.successes for r in res)}, proven bound "
            f"{sum(r.upper_bound for r in res)}, "
            f"Slack-Truth-displace {int(ok.sum())} tasks"
        )
        need, budget = ep.need.astype(float), (ep.deadline - ep.arrival).astype(float)
        alone = ep.valid & (need <= max(SPEED) * budget)
        groups = {
            "both": chosen & ok,
            "Clairvoyant only": chosen & ~ok,
            "rule only": ~chosen & ok,
            "neither (could finish alone)": ~chosen & ~ok & alone,
        }
        for name, g in groups.items():
            if g.any():
                print(
                    f"  {name:30s} {int(g.sum()):4d} tasks · median demand {np.median(need[g]):5.0f} · budget "
                    f"{np.median(budget[g]):4.0f} · demand/budget "
                    f"{np.median(need[g] / np.maximum(budget[g], 1)):.2f} · "
                    f"served by the rule {np.median(served[g]):4.0f}"
                )


if __name__ == "__main__":
    main()
