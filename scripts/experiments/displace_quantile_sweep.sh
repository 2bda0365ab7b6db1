#!/bin/bash
# Slack-QR-displace judged "finishable" at a lower level of the decision head than its median, on the three unequal-node
# profiles of the MARA-suite suite, on VALIDATION roots 1000-1004 only (4 episodes a root and task set):
#   bash scripts/experiments/displace_quantile_sweep.sh OUT
# prints the mean success (%) per load and over the loads, per profile and level (0.5 = Slack-QR-displace as shipped).
set -euo pipefail
OUT=${1:?usage: bash scripts/experiments/displace_quantile_sweep.sh OUT}
mkdir -p "$OUT"
for prof in "2,2,1,1,1,1,1:2" "3,1,1,1,1,1,1:1" "2,2,2,1,1,1,1:3"; do
  sp=${prof%%:*}; c=${prof##*:}
  for q in 0.5 0.3 0.2 0.1; do
    out=$OUT/${sp//,/}_c${c}_q$q
    level=()  # 0.5: the method as shipped (judged at the median); else the head's band starts at that trained level
    [ "$q" = 0.5 ] || level=("predictors.qr.band=[$q,0.5,0.9]" "+method_overrides={Slack-QR-displace: {allocator: {quantile: $q, band: [$q, 0.9]}}}")
    python -m mara.evaluate experiment=hetero "methods=[Slack-QR-displace]" "sim.node_speed=[$sp]" sim.switch_cost=$c \
      "eval.roots=[1000,1001,1002,1003,1004]" eval.episodes=4 eval.tensorboard=false hydra.run.dir=$out "${level[@]}" > $out.log 2>&1
    python - "$out/results.json" "$sp cost $c level $q" <<'PY'
import json, sys
import numpy as np
rows = json.load(open(sys.argv[1]))["rows"]
loads = sorted({r["load"] for r in rows})
per = [100 * np.mean([r["success_rate"] for r in rows if r["load"] == p]) for p in loads]
print(sys.argv[2], " ".join(f"{x:.2f}" for x in per), f"mean {np.mean(per):.2f}")
PY
  done
done
