#!/usr/bin/env bash
# Slack-FM-q readings on VALIDATION roots 1000-1004 (never the evaluation roots 0-4), all loads 0.04-0.07,
# 3 task sets x 12 episodes: 720 episodes per reading, identical for every reading. The first run also evaluates the
# references (Slack-WLS, Slack-FM, Slack-Truth) on the same episodes. Usage: scripts/experiments/slack_q_sweep.sh OUTDIR
# (QS="0.01 0.02" ATS=median SKIP_REF=1 scripts/experiments/slack_q_sweep.sh OUTDIR: other readings, references kept)
set -euo pipefail
OUT=${1:-outputs/slack_q_sweep}
mkdir -p "$OUT"
ROOTS='eval.roots=[1000,1001,1002,1003,1004]'
[ -n "${SKIP_REF:-}" ] || python -m mara.evaluate 'methods=[Slack-WLS,Slack-FM,Slack-Truth]' "$ROOTS" eval.tensorboard=false \
  paths.output_dir=$OUT/reference > $OUT/reference.log 2>&1
[ -n "${SKIP_REF:-}" ] || echo "reference: $(grep -A6 'Average success rate' $OUT/reference/results.md | tail -3 | tr '\n' ' ')"
for q in ${QS:-0.05 0.1 0.2 0.3 0.4}; do
  for at in ${ATS:-median quantile}; do
    name=q${q}_${at}
    python -m mara.evaluate 'methods=[Slack-FM-q]' "$ROOTS" eval.tensorboard=false paths.output_dir=$OUT/$name \
      "++method_overrides={Slack-FM-q: {allocator: {quantile: $q, slack_at: $at}}}" > $OUT/$name.log 2>&1
    echo "$name: $(grep -A4 'Average success rate' $OUT/$name/results.md | tail -1)"
  done
done
