# Sourced by the run scripts (run_t16.sh and later) first: the repository root as the working directory, $OUT/logs for
# the logs (OUT defaults to /tmp/mqa_out), t0 and el (seconds since the start, for the progress lines).
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/logs
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
