#!/usr/bin/env bash
# bench/atari.py's long runs, strictly one at a time (the machine's other core is for others).
#   nohup setsid bash bench/atari_queue.sh > /work/bench_logs/atari_queue.log 2>&1 &
#   DRY_RUN=1 bash bench/atari_queue.sh     # the runs it would start, one a line
# Run a copy (cp bench/atari_queue.sh /tmp/q.sh; bash /tmp/q.sh): bash reads a script as it
# runs, so editing the file under a running queue derails it.
# Each line is one run; a run whose result is kept (RESULTS/SUITE.json) is skipped, so the
# queue resumes.
# Logs and scratch go to WORK (outside the repo); results to bench/results/pixels/.
# PEERS=0 leaves the peers' runs out, OURS=0 beyondfit's (two queues may run side by side).
cd "$(dirname "$0")/.." || exit 1
WORK=${WORK:-/work/bench_logs/pixels}
run() {
  if [ -n "${DRY_RUN:-}" ]; then echo "python bench/atari.py $*"; return; fi
  echo "$(date '+%F %T') start $*"; python bench/atari.py --work "$WORK" "$@" > /dev/null
  echo "$(date '+%F %T') end (exit $?) $*"
}
if [ "${PEERS:-1}" != 0 ]; then
  run --suite minatar --run sb3-ppo breakout 1
  run --run cleanrl breakout 1
  run --run sb3-ppo breakout 1
  for game in breakout space_invaders asterix; do
    for seed in 1 2 3; do run --suite minatar --run sb3-ppo "$game" "$seed"; done
  done
  run --run cleanrl breakout 2
  for game in breakout space_invaders; do
    for seed in 1 2; do run --suite minatar --run sb3-dqn "$game" "$seed"; done
  done
fi
if [ "${OURS:-1}" != 0 ]; then
  run --suite minatar --run beyondfit-ppo breakout 1
  run --run beyondfit-ppo breakout 1
  for game in breakout space_invaders asterix; do
    for seed in 1 2 3; do run --suite minatar --run beyondfit-ppo "$game" "$seed"; done
  done
  run --run beyondfit-ppo breakout 2
  for seed in 1 2 3; do  # issue 45: PPO with and without each auxiliary loss
    for game in breakout space_invaders; do
      for aux in none shift reconstruction self_prediction; do
        run --suite minatar-aux --run "beyondfit-ppo-$aux" "$game" "$seed"
      done
    done
  done
  for game in breakout space_invaders; do
    for seed in 1 2; do run --suite minatar --run beyondfit-dqn "$game" "$seed"; done
  done
  for seed in 1 2; do  # issue 57: Atari 100k, one to two hours a DrQ(eps) run, SPR several
    for game in assault jamesbond krull boxing; do
      run --suite atari100k --run beyondfit-drqeps "$game" "$seed"
    done
    run --suite atari100k --run beyondfit-spr boxing "$seed"
    run --suite atari100k --run beyondfit-der assault "$seed"
  done
fi
[ -n "${DRY_RUN:-}" ] && exit 0
python bench/atari.py --table > /dev/null
python bench/atari.py --suite minatar --table > /dev/null
python bench/atari.py --suite minatar-aux --table > /dev/null
python bench/atari.py --suite atari100k --table > /dev/null
echo "$(date '+%F %T') queue done"
