#!/usr/bin/env python3
"""Per-seed table of the chaos suite's long run (results.jsonl, one `abcast chaos --json`
line per run), as markdown on stdout: pasted into summary.md."""
import json
import sys
from collections import defaultdict

path = sys.argv[1] if len(sys.argv) > 1 else "results.jsonl"
runs = [json.loads(line) for line in open(path) if line.strip()]
order = ["uring", "ringpaxos", "multiring", "seqpaxos", "raft", "token"]
by = defaultdict(list)
for r in runs:
    by[r["protocol"]].append(r)
kinds = ["kill", "kill_leader", "kill_all", "pause", "partition", "one_way", "wiped_restart"]
print("| protocol | storage | runs | ok | faults (" + ", ".join(kinds) + ") | acked | lost_acked | duplicates | phantom | longest recovery (s) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for p in order + sorted(set(by) - set(order)):
    rs = by.get(p, [])
    if not rs:
        continue
    f = defaultdict(int)
    for r in rs:
        for k, n in (r.get("faults") or {}).items():
            f[k] += n
    print(
        f"| {p} | {rs[0].get('storage', '?')} | {len(rs)} | {sum(1 for r in rs if r.get('ok'))} | "
        + " / ".join(str(f.get(k, 0)) for k in kinds)
        + f" | {sum(r.get('acked', 0) for r in rs)} | {sum(r.get('lost_acked', 0) for r in rs)}"
        + f" | {sum(r.get('duplicates', 0) for r in rs)} | {sum(r.get('phantom', 0) for r in rs)}"
        + f" | {max(r.get('longest_recovery_s', 0) for r in rs):.1f} |"
    )
print()
print("| protocol | seed | ok | faults | acked | lost_acked | dup | phantom | agreement | live after heal | longest recovery (s) | run (s) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for p in order + sorted(set(by) - set(order)):
    for r in sorted(by.get(p, []), key=lambda r: r.get("seed", 0)):
        faults = ", ".join(f"{k} {n}" for k, n in sorted((r.get("faults") or {}).items()))
        print(
            f"| {p} | {r.get('seed')} | {'yes' if r.get('ok') else '**NO**'} | {faults} | {r.get('acked', 0)} | "
            f"{r.get('lost_acked', '?')} | {r.get('duplicates', '?')} | {r.get('phantom', '?')} | "
            f"{r.get('agreement')} | {r.get('live_after_heal')} | {r.get('longest_recovery_s', 0):.1f} | "
            f"{r.get('run_s', 0):.0f} |"
        )
fails = [r for r in runs if not r.get("ok")]
if fails:
    print()
    print("Failures:")
    for r in fails:
        print(f"- {r.get('protocol')} seed {r.get('seed')}: `{r.get('replay', '')}`: {r.get('notes') or r.get('error')}")
