#!/usr/bin/env bash
# Make the completed real-data bank the package default and re-measure everything on it (issue 12).
#
#   scripts/ship_real_bank.sh [OUT]      # OUT: run folders (default outputs/real_bank); rerun to resume
#
# Every step is skipped when its result is already there, so an interrupted run continues where it stopped.
# Every training here is single-threaded, so independent ones run side by side (one per core).
#  1. ship: merge the plan's 780 shards, calibrate, validate, install mara/data/banks/zoo.parquet, and remove the
#     stand-in (synthetic) shards from data/zoo_bank/shards/;
#     (refuses while any curve of the plan is missing: `python -m mara.generate_curves` first);
#  2. the bank's FM checkpoint with the paper's inputs, fm_zoo.ckpt (the default, which the policies below use);
#  3. side by side: fm_zoo_v3.ckpt (issue 13) | the shipped MARA policies mara_zoo_seed{0,1,2}.ckpt (default recipe)
#     and the live-mode policy mara_live.ckpt (trained on the live-scaled bank, README "Live mode");
#  4. fidelity against Table 6 into docs/fidelity/, and the two live runs of the README into OUT/live*;
#  5. the paper's protocol on the new default bank, and the README's results section from its report.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-outputs/real_bank}"
CK=mara/data/checkpoints
mkdir -p "$OUT"
step() { printf '\n== %s · %s\n' "$(date +%H:%M:%S)" "$*"; }

if [ ! -e "$OUT/shipped" ]; then
  step "1/5 ship the real bank"
  python -m mara.generate_curves action=ship
  # the stand-in curves leave the tree (git history keeps them; `bank=parametric` stays the fast test bank)
  find data/zoo_bank/shards -name '*__synthetic__*.parquet' -delete
  touch "$OUT/shipped"
fi

if [ ! -e "$OUT/fm_v1/predictor/fm.ckpt" ]; then
  step "2/5 FM checkpoint, paper inputs (v1)"
  python -m mara.train stage=predictor predictor.net.feature_set=v1 hydra.run.dir="$OUT/fm_v1"
fi
cp "$OUT/fm_v1/predictor/fm.ckpt" "$CK/fm_zoo.ckpt"

fm_v3() {
  if [ ! -e "$OUT/fm_v3/predictor/fm.ckpt" ]; then
    step "3/5 FM checkpoint, v3 inputs"
    python -m mara.train stage=predictor trainer.max_epochs=40 hydra.run.dir="$OUT/fm_v3" > "$OUT/fm_v3.log" 2>&1
  fi
  cp "$OUT/fm_v3/predictor/fm.ckpt" "$CK/fm_zoo_v3.ckpt"
}
policies() {
  for s in 0 1 2; do
    if [ ! -e "$OUT/mara_seed$s/policy/checkpoints/best.ckpt" ]; then
      step "3/5 MARA policy, seed $s"
      python -m mara.train stage=policy seed="$s" hydra.run.dir="$OUT/mara_seed$s" > "$OUT/mara_seed$s.log" 2>&1
    fi
    cp "$OUT/mara_seed$s/policy/checkpoints/best.ckpt" "$CK/mara_zoo_seed$s.ckpt"
  done
  if [ ! -e "$OUT/live_mara/policy/checkpoints/best.ckpt" ]; then
    step "3/5 live-mode MARA policy (M = 2, K = 4, live-scaled bank)"
    python -m mara.live action=export_bank bank_out="$OUT/live_bank/live_bank.parquet" hydra.run.dir="$OUT/live_bank" > "$OUT/live_mara.log" 2>&1
    python -m mara.train stage=policy bank.path="$OUT/live_bank/live_bank.parquet" sim.nodes=2 sim.max_active=4 sim.steps=120 \
      mat.workload.load=0.05 mat.rollout.scale=88 mat.total_env_steps=40000 mat.validation.every_n_iterations=4 \
      seed=0 hydra.run.dir="$OUT/live_mara" >> "$OUT/live_mara.log" 2>&1
  fi
  cp "$OUT/live_mara/policy/checkpoints/best.ckpt" "$CK/mara_live.ckpt"
}
step "3/5 side by side (logs: $OUT/fm_v3.log, $OUT/mara_seed*.log, $OUT/live_mara.log)"
fm_v3 & a=$!
policies & b=$!
wait "$a" || { echo "FM v3 training failed: see $OUT/fm_v3.log" >&2; exit 1; }
wait "$b" || { echo "a policy training failed: see $OUT/mara_seed*.log and $OUT/live_mara.log" >&2; exit 1; }

step "4/5 fidelity against Table 6; the README's two live runs"
python -m mara.fidelity out_dir=docs/fidelity readme=README.md
[ -e "$OUT/live/live_results.json" ] || python -m mara.live hydra.run.dir="$OUT/live"
[ -e "$OUT/live6/live_results.json" ] || python -m mara.live 'methods=[MARA,Slack-FM,FIFO,EDF,LARA,LARA-FM]' live.episodes=3 live.load=0.1 hydra.run.dir="$OUT/live6"

step "5/5 the paper's protocol on the real bank (resumable), then the README's results section"
python -m mara.train experiment=paper hydra.run.dir="$OUT/paper"
python -m mara.report run="$OUT/paper" readme=README.md
step "done: review git diff (README, docs/, $CK), update the README's live tables from $OUT/live*/live_results.md, commit"
