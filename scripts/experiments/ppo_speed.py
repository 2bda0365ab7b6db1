"""PPO env-steps/s of one checkout, for comparing two trees side by side: the band recipe on the FM predictor, 3
timed iterations after 1 warm-up (``mat_throughput``, the function behind ``python -m mara.bench``'s PPO row). Run it
alternately on each tree, several times, and compare medians:

    OMP_NUM_THREADS=1 PYTHONPATH=<tree> python scripts/experiments/ppo_speed.py <label>
"""

import json
import sys
import time

from mara.bench.__main__ import mat_throughput
from mara.curves.bank import default_bank_path, load_bank


def main(label: str) -> None:
    bank = load_bank(default_bank_path())
    c0 = time.process_time()
    r = mat_throughput(bank, "fm", iterations=3)
    print(
        json.dumps(
            {
                "tree": label,
                "rollout": r["rollout"],
                "train": r["train"],
                "env_steps": r["env_steps"],
                "cpu_s": time.process_time() - c0,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "this")
