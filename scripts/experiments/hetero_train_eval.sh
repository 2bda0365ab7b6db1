#!/usr/bin/env bash
# Train MARA on heterogeneous nodes (experiment=hetero: speeds [2,2,1,1,1,1,1], switch cost 2, recipe
# mat=hetero) for several seeds in parallel, then evaluate the policies next to every rule and bound on identical
# episodes (evaluation roots 0-4, loads 0.04-0.07). Run from the repo root:
#   OUT=outputs/hetero_mara SEEDS="0 1 2" THREADS=1 bash scripts/experiments/hetero_train_eval.sh
# RECIPE / PREDICTOR / METHOD: the MAT recipe, its predictor and the method name its policies are evaluated as
#   (default mat=hetero on predictor qr = experiment=hetero's, evaluated as MARA-QR with predictor qr; the same tokens
#   on the FM band cloning Slack-FM-q: PREDICTOR=fm METHOD=MARA
#   EXTRA="mat.imitation.teacher=Slack-FM-q ~mat.net.token_q ~mat.net.token_band"). METHODS: the methods evaluated with it (default: every rule of
#   experiment=hetero except the Clairvoyant, ~6 s per episode; add Clairvoyant for the bound).
#   EXTRA: further overrides for the training runs (e.g. "mat.total_env_steps=1000000").
# Cost: each seed is one process (THREADS torch/BLAS threads); on the 2-core reference machine one seed took ~6 min
# alone (docs/allocators.md), the evaluation of the rules + MARA on 720 episodes ~10-20 min.
set -euo pipefail
OUT=${OUT:-outputs/hetero_mara}
SEEDS=${SEEDS:-"0 1 2"}
THREADS=${THREADS:-1}
RECIPE=${RECIPE:-hetero}
PREDICTOR=${PREDICTOR:-qr}
METHOD=${METHOD:-MARA-QR}
METHODS=${METHODS:-"[$METHOD,FIFO,EDF,LARA,LARA-FM,Slack-WLS,Slack-FM,Slack-FM-q,Slack-QR,Slack-QR-q,Slack-Truth,Oracle]"}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

pids=()
for s in $SEEDS; do
  # shellcheck disable=SC2086
  python -m mara.train experiment=hetero mat="$RECIPE" predictor="$PREDICTOR" stage=policy seed="$s" mat.num_threads="$THREADS" \
    paths.output_dir="$OUT/seed$s" hydra.run.dir="$OUT/seed$s" $EXTRA > "$OUT/train_seed$s.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ $status -eq 0 ] || { echo "a training run failed: see $OUT/train_seed*.log" >&2; exit 1; }

ckpts=""
for s in $SEEDS; do
  ckpts="$ckpts{train_seed:$s,ckpt_path:$PWD/$OUT/seed$s/policy/checkpoints/best.ckpt},"
done
python -m mara.evaluate experiment=hetero "methods=$METHODS" "+method_overrides.$METHOD={predictor:$PREDICTOR,checkpoints:[${ckpts%,}]}" \
  paths.output_dir="$OUT/evaluation" hydra.run.dir="$OUT/evaluation" eval.tensorboard=false > "$OUT/evaluate.log" 2>&1
echo "results: $OUT/evaluation/results.md (see 'Learned method minus the best non-learned method')"
