#!/bin/sh
# The chaos suite's long run (issue 33): SEEDS seeds x DURATION s per protocol, each run's
# `--json` line appended to results.jsonl, its stderr (the nemesis's narrative) kept under
# logs/. Needs root. Usage: run.sh [ABCAST_BINARY] (default: target/release/abcast).
#   SEEDS="1 2 3" DURATION=60 PROTOCOLS="uring raft" docs/benchmarks/chaos/run.sh
# FAULTS, STORAGE: passed as --faults, --storage; RESULTS: the JSON lines file; TAG: log prefix.
set -u
bin=${1:-target/release/abcast}
here=$(dirname "$0")
seeds=${SEEDS:-"1 2 3 4 5 6 7 8 9 10"}
duration=${DURATION:-60}
protocols=${PROTOCOLS:-"uring ringpaxos multiring seqpaxos raft token"}
results=${RESULTS:-$here/results.jsonl}
mkdir -p "$here/logs"
for p in $protocols; do
  for s in $seeds; do
    log="$here/logs/${TAG:-}$p-seed$s.log"
    line=$(nice -n 10 "$bin" chaos --protocol "$p" --seed "$s" --duration "$duration" \
      ${FAULTS:+--faults "$FAULTS"} ${STORAGE:+--storage "$STORAGE"} --json 2>"$log" | tail -n 1)
    [ -n "$line" ] || line="{\"ok\":false,\"protocol\":\"$p\",\"seed\":$s,\"error\":\"no JSON line; see logs/$p-seed$s.log\"}"
    echo "$line" >> "$results"
    echo "$p seed $s: $(echo "$line" | cut -c1-12)"
  done
done
