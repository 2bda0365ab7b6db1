#!/usr/bin/env bash
# GPU throughput check (< 4 minutes on one H200 with the repo installed by `pip install -e .`), run from the repo root:
#   OUT=/some/dir bash scripts/gpu_check.sh
# 1. torch sees the GPU;  2. `python -m mara.bench --device cuda --json $OUT/bench_gpu.json` (simulator and FM stay on
# the CPU, the MAT policy, its rollout forward passes and PPO updates run on the GPU);  3. a tiny whole-pipeline run
# `python -m mara.train experiment=smoke trainer=gpu` (predictor and policy trained on the GPU, then evaluated).
set -uo pipefail
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
status=0

echo "== torch / CUDA"
python - <<'PY' 2>&1 | tee "$OUT/cuda.txt"
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device 0:", torch.cuda.get_device_name(0))
PY

echo "== bench (MAT on cuda)"
timeout 120 python -m mara.bench --device cuda --repeats 1 --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.txt" || status=1

echo "== smoke training with trainer=gpu"
timeout 100 python -m mara.train experiment=smoke trainer=gpu paths.output_dir="$OUT/smoke" hydra.run.dir="$OUT/smoke" \
  > "$OUT/smoke.log" 2>&1 || status=1
tail -n 25 "$OUT/smoke.log"
echo "gpu_check status: $status (0 = every step ran)"
exit $status
