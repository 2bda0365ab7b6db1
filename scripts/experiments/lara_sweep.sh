#!/usr/bin/env bash
# LARA / LARA-FM readings on VALIDATION roots 1000-1004 (never the evaluation roots 0-4), all loads 0.04-0.07,
# 3 task sets x 12 episodes: 720 episodes per method and reading. Usage: scripts/experiments/lara_sweep.sh OUTDIR
set -euo pipefail
OUT=${1:-outputs/lara_sweep}
declare -A R=(
  [faithful]="{}"
  [no_reserve]="{cold_reserve: 0}"
  [cold_first]="{leftover: [cold_edf, warm_least_laxity]}"
  [no_reserve_cold_first]="{cold_reserve: 0, leftover: [cold_edf, warm_least_laxity]}"
  [dispatch_edf]="{dispatch: edf}"
  [plan_all]="{plan_nodes: all}"
  [cold_first_plan_all]="{leftover: [cold_edf, warm_least_laxity], plan_nodes: all}"
  [no_reserve_cold_first_edf]="{cold_reserve: 0, leftover: [cold_edf, warm_edf]}"
)
for name in "${!R[@]}"; do
  a=${R[$name]}
  python -m mara.evaluate 'methods=[LARA,LARA-FM]' 'eval.roots=[1000,1001,1002,1003,1004]' eval.tensorboard=false \
    paths.output_dir=$OUT/$name "++method_overrides={LARA: {allocator: $a}, LARA-FM: {allocator: $a}}" > $OUT.$name.log 2>&1
  echo "$name: $(grep -A4 'Average success rate' $OUT/$name/results.md | tail -2 | tr '\n' ' ')"
done
