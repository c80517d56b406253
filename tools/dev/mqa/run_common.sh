# Sourced by the run scripts (run_t16.sh and later) first: the repository root as the working directory, $OUT/logs for
# the logs (OUT defaults to /tmp/mqa_out), t0 and el (seconds since the start, for the progress lines), pack (below).
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/logs
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
# Archives $OUT/logs as $OUT/logs.tgz (replaced whole, so a call cut mid-write keeps the previous archive); scripts call it
# after each step and on exit.
pack() { tar czf $OUT/logs.tgz.tmp -C $OUT logs && mv $OUT/logs.tgz.tmp $OUT/logs.tgz; }
