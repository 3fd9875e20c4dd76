#!/usr/bin/env bash
# The off-policy bench's SB3 runs, one at a time, niced, in the order they are needed:
#   nohup bench/offpolicy_queue.sh >> offpolicy-queue.log 2>&1 &
# A run whose result file is kept is skipped, so the queue can be restarted at any time.
# Other runs can be queued by giving "METHOD TASK SEED" triples on the command line;
# OFFPOLICY_ARGS (e.g. "--budget 300 --results /tmp/r") is added to every run.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
jobs=("$@")
if [ ${#jobs[@]} -eq 0 ]; then
  jobs=("sb3-td3 pendulum 0" "sb3-td3 pendulum 1" "sb3-td3 pendulum 2"
        "sb3-sac hopper 0" "sb3-sac halfcheetah 0"
        "sb3-sac hopper 1" "sb3-sac halfcheetah 1"
        "sb3-sac hopper 2" "sb3-sac halfcheetah 2")
fi
for job in "${jobs[@]}"; do
  echo "$(date -u +%FT%TZ) start $job"
  # shellcheck disable=SC2086
  nice -n 19 python bench/offpolicy.py --run $job ${OFFPOLICY_ARGS:-} > /dev/null \
    || echo "FAILED: $job"
  echo "$(date -u +%FT%TZ) end $job"
done
