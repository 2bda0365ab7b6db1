#!/usr/bin/env bash
# Make the completed real-data bank the package default and re-measure everything on it (issue 12).
#
#   scripts/ship_real_bank.sh [OUT]      # OUT: run folders (default outputs/real_bank); rerun to resume
#
# Every step is skipped when its result is already there, so an interrupted run continues where it stopped.
#  1. ship: merge the plan's 780 shards, calibrate, validate, install mara/data/banks/zoo.parquet, and remove the
#     stand-in (synthetic) shards from data/zoo_bank/shards/;
#     (refuses while any curve of the plan is missing: `python -m mara.generate_curves` first);
#  2. the bank's FM checkpoints: fm_zoo.ckpt (the paper's v1 inputs, the default) and fm_zoo_v3.ckpt (issue 13);
#  3. the shipped MARA policies mara_zoo_seed{0,1,2}.ckpt (python -m mara.train stage=policy, default recipe);
#  4. fidelity against Table 6 into docs/fidelity/;
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
if [ ! -e "$OUT/fm_v3/predictor/fm.ckpt" ]; then
  step "2/5 FM checkpoint, v3 inputs"
  python -m mara.train stage=predictor trainer.max_epochs=40 hydra.run.dir="$OUT/fm_v3"
fi
cp "$OUT/fm_v3/predictor/fm.ckpt" "$CK/fm_zoo_v3.ckpt"

for s in 0 1 2; do
  if [ ! -e "$OUT/mara_seed$s/policy/checkpoints/best.ckpt" ]; then
    step "3/5 MARA policy, seed $s"
    python -m mara.train stage=policy seed="$s" hydra.run.dir="$OUT/mara_seed$s"
  fi
  cp "$OUT/mara_seed$s/policy/checkpoints/best.ckpt" "$CK/mara_zoo_seed$s.ckpt"
done

step "4/5 fidelity against Table 6"
python -m mara.fidelity out_dir=docs/fidelity

step "5/5 the paper's protocol on the real bank (resumable), then the README's results section"
python -m mara.train experiment=paper hydra.run.dir="$OUT/paper"
python -m mara.report run="$OUT/paper" readme=README.md
step "done: review git diff (README, docs/, $CK) and commit"
