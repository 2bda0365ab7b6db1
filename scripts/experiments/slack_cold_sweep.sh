#!/usr/bin/env bash
# Slack-QR-q-cold readings on VALIDATION roots 1000-1004 only (never the evaluation roots 0-4), loads 0.04-0.07,
# 3 task sets x 12 episodes: 720 episodes per reading, identical for every reading. A reading is the observation
# count from which the rule judges a task (allocator.warm_obs), the cold prior's number of nearest training curves
# (predictors.qr_q_cold.cold.k) and optionally the level of the prior's band the rule reads as "finishable"
# (predictors.qr_q_cold.cold.band[0]; default 0.05, the head's). The first run also evaluates the references Slack-QR-q, Slack-Truth and
# Slack-Truth-cold (warm_obs 1). Criterion: the highest mean success over the four loads.
# Usage: [READINGS="1:10 2:10 3:10 1:5 1:20 1:20:0.3"] [SKIP_REF=1] scripts/experiments/slack_cold_sweep.sh OUTDIR
#        python -m mara.report paired OUTDIR/ref/results.json,OUTDIR/w1_k10/results.json Slack-QR-q ...
set -euo pipefail
OUT=${1:-outputs/slack_cold_sweep}
mkdir -p "$OUT"
ROOTS='eval.roots=[1000,1001,1002,1003,1004]'
LOADS='sim.loads=[0.04,0.05,0.06,0.07]'
if [ -z "${SKIP_REF:-}" ]; then
  python -m mara.evaluate 'methods=[Slack-QR-q,Slack-Truth,Slack-Truth-cold]' "$ROOTS" "$LOADS" eval.tensorboard=false \
    paths.output_dir=$OUT/ref > $OUT/ref.log 2>&1
  echo "ref: $(grep -A6 'Average success rate' $OUT/ref/results.md | tail -3 | tr '\n' ' ')"
fi
for r in ${READINGS:-1:10 2:10 3:10 1:5 1:20}; do
  w=${r%%:*}; k=${r#*:}; lo=${k#*:}; k=${k%%:*}; [ "$lo" != "$k" ] || lo=0.05  # warm_obs:k[:cold band's lower level]
  name=w${w}_k${k}; [ "$lo" = 0.05 ] || name=${name}_lo${lo}
  python -m mara.evaluate 'methods=[Slack-QR-q-cold]' "$ROOTS" "$LOADS" eval.tensorboard=false paths.output_dir=$OUT/$name \
    "predictors.qr_q_cold.cold.k=$k" "++predictors.qr_q_cold.cold.band=[$lo,0.5,0.9]" \
    "++method_overrides={Slack-QR-q-cold: {allocator: {warm_obs: $w}}}" > $OUT/$name.log 2>&1
  echo "$name: $(grep -A4 'Average success rate' $OUT/$name/results.md | tail -1)"
done
