#!/usr/bin/env bash
# One short GPU check (6 minutes on an H200, before the pixel runs): the tests that need CUDA
# (the rollout collector's resume among them), then regression, classification (its refit) and
# CartPole with device=cuda in fp32, bf16 and fp16 (and DDP over NCCL), each timed against the
# same run on the CPU, then the compiled step on CUDA (engine.compile=true, and max: CUDA graphs
# for evaluation) for regression and Pendulum SAC, then the pixel tasks (MinAtar and Atari, PPO
# and DQN, each resumed once). Prints a table; the run directories and logs stay in $OUT
# (or a temp dir).
#
#   bash bench/gpu_check.sh                    # on a machine with CUDA
#   CHECK_DEVICE=cpu bash bench/gpu_check.sh   # dry run of this script on a CPU-only machine
#
# Exit status: 0 when the tests and every run passed, 1 otherwise (the table says which).
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE="${CHECK_DEVICE:-cuda}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" PYTHONUNBUFFERED=1
# Keys added with ++ so the script works whether or not a config has them.
QUIET=(++progress.bar=false ++plots=false checkpoint.every=null)
STATUS=0
ROWS=()
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

python - "$DEVICE" <<'EOF' || exit 1
import sys, torch
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, "
      f"CUDA available {torch.cuda.is_available()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, "
          f"bf16 {torch.cuda.is_bf16_supported()}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("no CUDA device here: nothing to check (CHECK_DEVICE=cpu runs a dry run)")
EOF

echo "== tests that need CUDA (and the precision tests)"
start=$(date +%s.%N)
if timeout 150 python -m pytest -q -p no:cacheprovider tests/core/test_cuda.py tests/core/test_precision.py \
        tests/rl/test_collector.py \
        > "$OUT/pytest.log" 2>&1; then
    verdict=ok
else
    verdict=FAILED; STATUS=1
fi
tail -n 3 "$OUT/pytest.log"
ROWS+=("$(printf '%-11s %-5s %-6s %7s %8s  %s' tests "$DEVICE" - \
    "$(elapsed "$start" "$(date +%s.%N)")" - "$verdict: $(tail -n 1 "$OUT/pytest.log")")")

# run LABEL TASK DEVICE PRECISION [overrides...]: one CLI run, timed; its result line.
run() {
    local label=$1 task=$2 device=$3 precision=$4
    shift 4
    local dir="$OUT/$label" t0 t1 rc engine result
    t0=$(date +%s.%N)
    timeout 120 python -m beyondfit "+task=$task" "device=$device" "engine.precision=$precision" \
        "hydra.run.dir=$dir" "${QUIET[@]}" "$@" > "$OUT/$label.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    engine=$(grep -o 'done in [0-9.]*s' "$OUT/$label.log" | grep -o '[0-9.]*' | tail -n 1)
    if [ "$task" = regression ]; then
        result=$(grep -o 'validation R2: model [-0-9.]*' "$OUT/$label.log" | tail -n 1)
    elif [ "$task" = classification ]; then
        result="$(grep -o 'validation accuracy: model [0-9.]*' "$OUT/$label.log" | tail -n 1)$(
            grep -o '; then refit on[^(]*epochs' "$OUT/$label.log" | tail -n 1)"
    else
        result=$(grep -o 'greedy val_return [-0-9.]*' "$OUT/$label.log" | tail -n 1)
    fi
    result="$result $(grep -o 'compiled: [0-9]* graphs\?, [0-9]* recompiles\?, [0-9]* parts\? left eager' \
        "$OUT/$label.log" | tail -n 1)"
    if [ $rc -ne 0 ]; then
        STATUS=1
        result="FAILED (exit $rc): $(tail -n 1 "$OUT/$label.log")"
    fi
    ROWS+=("$(printf '%-11s %-5s %-6s %7s %8s  %s' "$task" "$device" "$precision" \
        "$(elapsed "$t0" "$t1")" "${engine:--}" "$result")")
    echo "${ROWS[-1]}"
}

echo "== runs (wall = whole process incl. start-up; engine = run() time)"
REG=(train.epochs=60)
CART=(task.total_env_steps=20000 train.stop=null)  # a fixed budget: comparable times
run reg-cpu-32 regression cpu 32 "${REG[@]}"
for p in 32 bf16 16; do run "reg-$DEVICE-$p" regression "$DEVICE" "$p" "${REG[@]}"; done
# Classification: the 8-member ensemble, then its refit on every row (its own engine and a
# random stream forked from the seed on the device).
run "cls-$DEVICE-32" classification "$DEVICE" 32 train.epochs=40
run cart-cpu-32 cartpole cpu 32 "${CART[@]}"
for p in 32 bf16 16; do run "cart-$DEVICE-$p" cartpole "$DEVICE" "$p" "${CART[@]}"; done

echo "== the compiled step (engine.compile=true, and max: CUDA graphs for evaluation)"
for mode in true max; do
    run "reg-$DEVICE-c$mode" regression "$DEVICE" 32 "${REG[@]}" "engine.compile=$mode"
    run "sac-$DEVICE-c$mode" pendulum "$DEVICE" 32 algo=sac task.total_env_steps=3000 \
        task.replay.learning_starts=1000 "engine.compile=$mode"
done
# A model of 2^21 values or more (KERNEL_FROM; 2.4M here): its optimizer steps with torch's
# fused kernel after the graph (the non-finite flag passed as found_inf, the step counts moved
# to the GPU first).
run "reg-$DEVICE-ckernel" regression "$DEVICE" 32 "${REG[@]}" engine.compile=true \
    'task.hidden=[1536,1536]'

echo "== pixels (+debug=fast: a few steps, then a resume from the step-1 checkpoint)"
# uint8 frames and bool boards to the device, each encoder there, DQN's replay sampled on the
# device, and PPO's rollout saved mid-epoch (its shuffle and generator on the device) and resumed.
run "minatar-ppo-$DEVICE" minatar "$DEVICE" 32 +debug=fast
run "minatar-dqn-$DEVICE" minatar "$DEVICE" 32 algo=dqn +debug=fast
run "atari-ppo-$DEVICE" atari "$DEVICE" 32 +debug=fast
run "atari-dqn-$DEVICE" atari "$DEVICE" 32 algo=dqn +debug=fast

echo "== DDP: torchrun, one process per GPU (NCCL; Gloo on a dry run)"
NPROC=$(python -c "import torch; print(max(1, torch.cuda.device_count()) if '$DEVICE' == 'cuda' else 2)")
t0=$(date +%s.%N)
timeout 120 python -m torch.distributed.run --standalone --nproc_per_node="$NPROC" \
    -m beyondfit +task=regression device="$DEVICE" engine.strategy=ddp train.epochs=20 \
    hydra.run.dir="$OUT/reg-ddp" "${QUIET[@]}" > "$OUT/reg-ddp.log" 2>&1
rc=$?
t1=$(date +%s.%N)
result=$(grep -o 'validation R2: model [-0-9.]*' "$OUT/reg-ddp.log" | tail -n 1)
engine=$(grep -o 'done in [0-9.]*s' "$OUT/reg-ddp.log" | grep -o '[0-9.]*' | tail -n 1)
if [ $rc -ne 0 ]; then STATUS=1; result="FAILED (exit $rc): $(tail -n 1 "$OUT/reg-ddp.log")"; fi
ROWS+=("$(printf '%-11s %-5s %-6s %7s %8s  %s' "ddp x$NPROC" "$DEVICE" 32 \
    "$(elapsed "$t0" "$t1")" "${engine:--}" "$result")")
echo "${ROWS[-1]}"

echo
echo "== summary (logs and run directories in $OUT)"
printf '%-11s %-5s %-6s %7s %8s  %s\n' what device prec "wall s" "engine s" result
printf '%s\n' "${ROWS[@]}"
exit $STATUS
