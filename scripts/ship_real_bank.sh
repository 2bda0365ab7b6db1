#!/usr/bin/env bash
# Make the completed real-data bank the package default and re-measure everything on it.
#
#   scripts/ship_real_bank.sh [OUT] [FROM]   # OUT: run folders (default outputs/real_bank); rerun to resume
#
# Every step is skipped when its result is already in OUT, so an interrupted run continues where it stopped.
# FROM (default 1) skips the steps before it entirely, for a fresh machine where their results are committed
# (the bank and the checkpoints in mara/data/, docs/, README) but OUT is gone.
# Every training here is single-threaded, so independent ones run side by side (one per core).
#  1. ship: merge the plan's 780 shards, calibrate, validate, install mara/data/banks/zoo.parquet, and remove the
#     stand-in (synthetic) shards from data/zoo_bank/shards/ (refuses while any curve of the plan is missing:
#     `python -m mara.generate_curves` first);
#  2. the bank's FM checkpoint with the paper's inputs, fm_zoo.ckpt (the default; the policies below use it);
#  3. the paper's protocol on the new bank with that FM (12 MAT trainings, every method at every load, stress,
#     prediction); its three MARA policies ship as mara_zoo_seed{0,1,2}.ckpt; the README's results section;
#  4. side by side: fm_zoo_v3.ckpt (v3 predictor) | the live-mode policy mara_live.ckpt (live-scaled bank);
#  5. the README's other measurements into OUT: Table-6 fidelity (docs/fidelity/ and the README), the rules on the
#     evaluation episodes, Table 1 with the v3 predictor, leave-one-family-out, the LARA readings on validation
#     roots, and the two live runs; then the README's tables from them (`python -m mara.readme_tables`).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-outputs/real_bank}"
FROM="${2:-1}"
CK=mara/data/checkpoints
mkdir -p "$OUT"
step() { printf '\n== %s · %s\n' "$(date +%H:%M:%S)" "$*"; }
todo() { [ "$FROM" -le "$1" ]; }

if todo 1 && [ ! -e "$OUT/shipped" ]; then
  step "1/5 ship the real bank"
  python -m mara.generate_curves action=ship
  # the stand-in curves leave the tree (git history keeps them; `bank=parametric` stays the fast test bank)
  find data/zoo_bank/shards -name '*__synthetic__*.parquet' -delete
  touch "$OUT/shipped"
fi

if todo 2; then
  if [ ! -e "$OUT/fm_v1/predictor/fm.ckpt" ]; then
    step "2/5 FM checkpoint, paper inputs (v1)"
    python -m mara.train stage=predictor predictor=fm predictor.net.feature_set=v1 hydra.run.dir="$OUT/fm_v1"
  fi
  cp "$OUT/fm_v1/predictor/fm.ckpt" "$CK/fm_zoo.ckpt"
fi

if todo 3; then
  step "3/5 the paper's protocol on the real bank with fm_zoo.ckpt (resumable), the shipped MARA policies, the README's results"
  python -m mara.train experiment=paper predictor.ckpt_path="$PWD/$CK/fm_zoo.ckpt" hydra.run.dir="$OUT/paper"
  for s in 0 1 2; do cp "$OUT/paper/policy/MARA/seed$s/checkpoints/best.ckpt" "$CK/mara_zoo_seed$s.ckpt"; done
  python -m mara.report run="$OUT/paper" readme=docs/results.md
fi

fm_v3() {
  if [ ! -e "$OUT/fm_v3/predictor/fm.ckpt" ]; then
    python -m mara.train stage=predictor predictor=fm trainer.max_epochs=40 hydra.run.dir="$OUT/fm_v3" > "$OUT/fm_v3.log" 2>&1
  fi
  cp "$OUT/fm_v3/predictor/fm.ckpt" "$CK/fm_zoo_v3.ckpt"
}
live_policy() {
  if [ ! -e "$OUT/live_mara/policy/checkpoints/best.ckpt" ]; then
    python -m mara.live action=export_bank bank_out="$OUT/live_bank/live_bank.parquet" hydra.run.dir="$OUT/live_bank" > "$OUT/live_mara.log" 2>&1
    python -m mara.train stage=policy mat=band predictor=fm bank.path="$OUT/live_bank/live_bank.parquet" sim.nodes=2 sim.max_active=4 sim.steps=120 \
      mat.workload.load=0.05 mat.rollout.scale=88 mat.total_env_steps=40000 mat.validation.every_n_iterations=4 \
      seed=0 hydra.run.dir="$OUT/live_mara" >> "$OUT/live_mara.log" 2>&1
  fi
  cp "$OUT/live_mara/policy/checkpoints/best.ckpt" "$CK/mara_live.ckpt"
}
if todo 4; then
  step "4/5 side by side: FM v3 | live-mode policy (logs: $OUT/fm_v3.log, $OUT/live_mara.log)"
  fm_v3 & a=$!
  live_policy & b=$!
  wait "$a" || { echo "FM v3 training failed: see $OUT/fm_v3.log" >&2; exit 1; }
  wait "$b" || { echo "the live policy's training failed: see $OUT/live_mara.log" >&2; exit 1; }
fi

rules() {
  local m='methods=[Slack-FM,LARA,LARA-FM,LARA-best,LARA-FM-best]'
  [ -e "$OUT/rules/results.json" ] || python -m mara.evaluate "$m" hydra.run.dir="$OUT/rules" > "$OUT/rules.log" 2>&1
  [ -e "$OUT/rules_stress/results.json" ] || python -m mara.evaluate "$m" scenario=stress hydra.run.dir="$OUT/rules_stress" >> "$OUT/rules.log" 2>&1
  [ -e "$OUT/prediction_v3/DONE" ] || { python -m mara.evaluate experiment=prediction predictors.fm.ckpt_variant=v3 \
      hydra.run.dir="$OUT/prediction_v3" > "$OUT/prediction_v3.log" 2>&1 && touch "$OUT/prediction_v3/DONE"; }
  [ -e "$OUT/lara_sweep.done" ] || { scripts/experiments/lara_sweep.sh "$OUT/lara_sweep" > "$OUT/lara_sweep.md" && touch "$OUT/lara_sweep.done"; }
}
lofo_and_live() {
  [ -e "$OUT/lofo/DONE" ] || { python -m mara.evaluate experiment=prediction_lofo hydra.run.dir="$OUT/lofo" > "$OUT/lofo.log" 2>&1 \
      && touch "$OUT/lofo/DONE"; }
  [ -e "$OUT/live/live_results.json" ] || python -m mara.live hydra.run.dir="$OUT/live" > "$OUT/live.log" 2>&1
  [ -e "$OUT/live6/live_results.json" ] || python -m mara.live 'methods=[MARA,Slack-FM,FIFO,EDF,LARA,LARA-FM]' live.episodes=3 \
      live.load=0.1 hydra.run.dir="$OUT/live6" >> "$OUT/live.log" 2>&1
}
if todo 5; then
  step "5/5 fidelity against Table 6; side by side: rules, Table 1 (v3), LARA readings | LOFO, the two live runs"
  python -m mara.fidelity out_dir=docs/fidelity readme=docs/results.md
  rules & a=$!
  lofo_and_live & b=$!
  wait "$a" || { echo "a measurement failed: see $OUT/rules.log, $OUT/prediction_v3.log, $OUT/lara_sweep.*.log" >&2; exit 1; }
  wait "$b" || { echo "a measurement failed: see $OUT/lofo.log, $OUT/live.log" >&2; exit 1; }
fi
step "the README's measured tables from $OUT (python -m mara.readme_tables)"
python -m mara.readme_tables run="$OUT" readme=docs/results.md
step "done: review git diff (README, docs/, $CK); update the README's prose around the generated tables and the
numbers still typed in it (logs: $OUT/*.log); commit"
