#!/usr/bin/env bash
# The learner on an NVIDIA GPU, once, with learner.device = "cuda": zrl-bench learner (V-trace's fed learner against
# its bare loop) in fp32 and bf16; zrl-bench pipeline for both agents; then a short V-trace Pong run and a short
# Ape-X Pong run through zrl-bench learning (zrl-launch's own path). Every core but two goes to workers.
# Run from the repository root on a machine with CUDA; figures and curves (JSON) go to $OUT (default perf/results/gpu).
#   bash perf/gpu_check.sh [SECONDS_OF_EACH_RUN]
set -u
out=${OUT:-perf/results/gpu}
seconds=${1:-120}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cuda=(--set 'learner.device="cuda"')
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    echo "cpu cores $(nproc)"
} | tee "$out/gpu.txt"
status=0
for precision in fp32 bf16; do
    python3 bin/zrl-bench learner --config config/pong.toml "${cuda[@]}" --set "learner.precision=\"$precision\"" \
        --seconds 5 --json "$out/learner_pong_$precision.json" || status=1
done
workers=$(($(nproc) - 2))
for cfg in pong apex_iqn_pong; do
    python3 bin/zrl-bench pipeline --config "config/$cfg.toml" "${cuda[@]}" --workers "$workers" \
        --warmup 20 --seconds 15 --no-ceiling --json "$out/pipeline_$cfg.json" || status=1
done
for cfg in pong apex_iqn_pong; do
    python3 bin/zrl-bench learning --config "config/$cfg.toml" "${cuda[@]}" --set "workers.count=$workers" \
        --seconds "$seconds" --seeds 1 --results-dir /tmp/zrl-gpu \
        --json "$out/learning_$cfg.json" || status=1
done
echo "zrl segments left in /dev/shm: $(ls /dev/shm | grep -c zrl)" | tee -a "$out/gpu.txt"
exit $status
