"""The validation-root check behind Slack's fastest-node steps (mara/allocators/slack.py) and the shared placement
(mara/allocators/placement.py) on heterogeneous nodes.

    python scripts/experiments/hetero_placement_validation.py

Validation roots 100-101 (never the evaluation roots 0-4), 4 episodes per task set, p = 0.04 and 0.07, WLS
estimates, speeds [2,2,1,1,1,1,1], switch cost 0 and 2. Prints mean success (%) and the switches paid.
"""

from __future__ import annotations

import numpy as np

import mara.allocators.slack as slack
from mara.allocators.lara import LARA
from mara.allocators.rules import EDF, FIFO
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.baselines.wls import WLSPredictor
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.workload import PAPER_TASK_SETS, EpisodeBatch, generate_episodes


class SlackUnitSteps(slack.SlackRule):
    """Slack without fastest-node steps: remaining batches counted as unit-speed steps."""

    def act(self, obs):
        keep = slack.fastest_node_steps
        slack.fastest_node_steps = lambda obs, pred: pred
        try:
            return super().act(obs)
        finally:
            slack.fastest_node_steps = keep


def main() -> None:
    import sys

    if sys.argv[1:] and sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    bank = load_bank(default_bank_path())
    ep = EpisodeBatch.concat(
        [
            generate_episodes(bank, bank.family_params, ts, p, r, 4)
            for ts in PAPER_TASK_SETS.values()
            for p in (0.04, 0.07)
            for r in (100, 101)
        ]
    )
    speed = [2, 2, 1, 1, 1, 1, 1]
    for cost in (0, 2):
        for name, make, pred in (
            ("FIFO", FIFO, None),
            ("EDF", EDF, None),
            ("LARA", LARA, WLSPredictor),
            ("Slack-WLS (unit steps)", SlackUnitSteps, WLSPredictor),
            ("Slack-WLS (fastest-node steps)", slack.SlackRule, WLSPredictor),
        ):
            m = run_episodes(
                BatchedEnv(ep, bank, predictor=pred and pred(), node_speed=speed, switch_cost=cost), make()
            )
            print(
                f"switch_cost {cost}  {name:32s} {100 * np.mean(m['success_rate']):6.2f} %  switches "
                f"{int(m['switches'].sum())}"
            )


if __name__ == "__main__":
    main()
