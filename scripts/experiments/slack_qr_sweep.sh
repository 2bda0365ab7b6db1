#!/usr/bin/env bash
# Slack-QR-q readings on VALIDATION roots 1000-1004 only (never the evaluation roots 0-4), loads
# 0.04-0.07, 3 task sets x 12 episodes: 720 episodes per reading, identical for every reading. Each reading sets
# the level the rule reads as "finishable" (a trained level of the decision head, conf/predictor/qr.yaml net.levels).
# Usage: [CKPT=path/qr.ckpt] [QS="0.01 0.02 0.05"] scripts/experiments/slack_qr_sweep.sh OUTDIR
set -euo pipefail
OUT=${1:-outputs/slack_qr_sweep}
mkdir -p "$OUT"
ROOTS='eval.roots=[1000,1001,1002,1003,1004]'
LOADS='sim.loads=[0.04,0.05,0.06,0.07]'
CK=()
[ -z "${CKPT:-}" ] || CK=(predictors.qr.ckpt_path=$CKPT predictors.qr_q.ckpt_path=$CKPT)
for q in ${QS:-0.01 0.02 0.05 0.1 0.2 0.3}; do
  name=q${q}
  python -m mara.evaluate 'methods=[Slack-QR-q]' "$ROOTS" "$LOADS" eval.tensorboard=false paths.output_dir=$OUT/$name \
    "${CK[@]}" "predictors.qr_q.band=[$q,0.5,0.9]" \
    "++method_overrides={Slack-QR-q: {allocator: {quantile: $q, band: [$q, 0.9]}}}" > $OUT/$name.log 2>&1
  echo "$name: $(grep -A4 'Average success rate' $OUT/$name/results.md | tail -1)"
done
