#!/usr/bin/env bash
# bench/atari.py's long runs, strictly one at a time (the machine's other core is for others).
#   nohup setsid bash bench/atari_queue.sh > /work/bench_logs/atari_queue.log 2>&1 &
# Each line is one run; a run whose result file exists is skipped, so the queue resumes.
# Logs and scratch go to WORK (outside the repo); results to bench/results/pixels/.
cd "$(dirname "$0")/.." || exit 1
WORK=${WORK:-/work/bench_logs/pixels}
run() { echo "$(date '+%F %T') start $*"; python bench/atari.py --work "$WORK" "$@" > /dev/null
        echo "$(date '+%F %T') end (exit $?) $*"; }
run --suite minatar --run sb3-ppo breakout 1
run --run cleanrl breakout 1
run --run sb3-ppo breakout 1
run --run cleanrl breakout 2
for game in breakout space_invaders asterix; do
  for seed in 1 2 3; do run --suite minatar --run sb3-ppo "$game" "$seed"; done
done
for game in breakout space_invaders; do
  for seed in 1 2; do run --suite minatar --run sb3-dqn "$game" "$seed"; done
done
python bench/atari.py --table > /dev/null
python bench/atari.py --suite minatar --table > /dev/null
echo "$(date '+%F %T') queue done"
