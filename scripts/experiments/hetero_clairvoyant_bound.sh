#!/usr/bin/env bash
# The Clairvoyant bound of experiment=hetero on evaluation roots 0-4 (720 episodes), episodes solved in
# parallel processes (Clairvoyant `workers`). Run from the repo root; OUT = where results go. On a 16-core machine:
#   OUT=... WORKERS=16 bash scripts/experiments/hetero_clairvoyant_bound.sh          (≈ 5 min; 2-core machine: WORKERS=2, ≈ 40 min)
# The rules then join the same folder on the same episodes:
#   python -m mara.evaluate experiment=hetero eval.resume=true paths.output_dir=$OUT/hetero_bound
set -uo pipefail
OUT=${OUT:-outputs/hetero_bound}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
nproc --all
timeout ${LIMIT:-560} python -m mara.evaluate experiment=hetero 'methods=[Clairvoyant]' \
  +method_overrides.Clairvoyant.workers=${WORKERS:-0} eval.tensorboard=false \
  paths.output_dir="$OUT/hetero_bound" hydra.run.dir="$OUT/hydra" ${EXTRA:-} 2>&1 | tee "$OUT/log.txt" | grep -v "it/s\]$" | tail -30
