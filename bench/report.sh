#!/usr/bin/env bash
# Turns a results file of bench/run.sh into Markdown tables and PNG charts.
#
#   bench/report.sh RESULTS.json OUT_PREFIX
#
# Writes OUT_PREFIX.md, OUT_PREFIX-throughput.png, OUT_PREFIX-latency.png and
# OUT_PREFIX-failover.png. Needs jq and gnuplot. Ratios compare Ticketing
# with etcd on tmpfs (etcd's best case) and with Redis, same case, same run.
set -euo pipefail
IN=$1
OUT=$2
BASE=$(basename "$OUT")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

JQ_LIB=$(cat "$(dirname "$0")/report.jq")

jq -r "$JQ_LIB"'
. as $r |
["ticketing", "etcd-tmpfs", "etcd-disk", "redis"] as $sys |
"# Lock service benchmark, \(.meta.date), commit \(.meta.commit)\n",
"Command: `\(.meta.command)` (\(if .meta.quick then "quick" else "full" end) mode, \(.meta.elapsed_s) s). \(if (.meta.rounds // 1) > 1 then "The common scenarios ran in \(.meta.rounds) rounds (fresh clusters each); each cell shows the better round of that system, the JSON has both." else "One round." end)",
"Machine: \(.meta.machine.cores) cores (\(.meta.machine.cpu)), \(.meta.machine.memory), kernel \(.meta.machine.kernel); shared with other work (load average at the end: \(.meta.machine.loadavg_at_end)). Servers and load generator on the same machine, 127.0.0.1 only.",
"Versions: \(.meta.versions.etcd); Redis \(.meta.versions.redis). Setup: Ticketing \(.meta.setup.ticketing); etcd \(.meta.setup.etcd); Redis \(.meta.setup.redis); \(.meta.setup.bench).\n",
"## Throughput\n",
"Grants per second (uncontended: acquire+release pairs per second). Same clients for every system in a row.\n",
"| case | clients | Ticketing | etcd (tmpfs) | etcd (disk) | Redis | Ticketing/etcd | Ticketing/Redis |",
"|---|---:|---:|---:|---:|---:|---:|---:|",
( ["uncontended", "uncontended-pipelined", "hotkey-1", "hotkey-16", "hotkey-64", "ticketdrop"][] as $c |
  [$sys[] as $s | $r | run($s; $c)] as $v |
  ($v | map(select(. != null)) | first // null) as $any |
  if $any == null then empty else
  "| \($c) | \($any.clients) | " +
  ([$v[] | if . == null then null else rate($c) end | num] | join(" | ")) + " | " +
  ratio($v[0] | if . == null then null else rate($c) end; $v[1] | if . == null then null else rate($c) end) + " | " +
  ratio($v[0] | if . == null then null else rate($c) end; $v[3] | if . == null then null else rate($c) end) + " |"
  end ),
"\nclients = connections x pipelining depth; uncontended: each client its own keys; hotkey-W: W clients on one key; ticketdrop: \(run("ticketing"; "ticketdrop") // run("redis"; "ticketdrop") | if . == null then "" else "\(.clients) clients over \(.keys) keys, Zipf \(.zipf), critical section \(.hold_ms) ms, wait \(.wait_ms) ms, lease \(.lease_ms) ms" end).\n",
( [run("ticketing-t1"; "uncontended"), run("ticketing-t1"; "uncontended-half"), run("ticketing-t1"; "uncontended-pipelined"), run("ticketing-t1"; "hotkey-16"), run("ticketing-t1"; "hotkey-64")] as $t1 |
  if ($t1 | map(select(. != null)) | length) == 0 then empty else
  "Ticketing with `--threads 1` per node, the worker running the Raft loop too (the table above uses `--threads 2`: two workers and a Raft thread per node):\n",
  "| case | Ticketing --threads 1 | p50 / p99 / p99.9 / max ms | Ticketing/etcd | Ticketing/Redis |",
  "|---|---:|---|---:|---:|",
  ( $t1[] | select(. != null) | .case as $c |
    if $c == "uncontended-half" then
      "| uncontended, half load (\(.rate_target | num)/s) | \(rate($c) | num) | \(lat) | – | – |"
    else
      "| \($c) | \(rate($c) | num) | \(lat) | \(ratio(rate($c); $r | run("etcd-tmpfs"; $c) | if . == null then null else rate($c) end)) | \(ratio(rate($c); $r | run("redis"; $c) | if . == null then null else rate($c) end)) |"
    end ),
  "" end ),
( [["uncontended", "uncontended-pipelined", "hotkey-16"][] as $c |
   [["ticketing-pin", "ticketing1-pin", "redis-pin", "etcd-pin"][] as $s | $r | run($s; $c)]] as $rows |
  if ([$rows[][] | select(. != null)] | length) == 0 then empty else
  "## Placement: servers on CPU 0, load generator on CPU 1\n",
  "The tables above share both CPUs between servers and load generator. Here every system gets one CPU for all its processes (`taskset`), and ticketing-bench the other: the same budget for a 3-node Ticketing cluster (`--threads 1`), one Ticketing node without replication, one Redis and a 3-member etcd.\n",
  "| case | Ticketing 3 nodes | Ticketing 1 node | Redis | etcd (tmpfs) | 3 nodes/Redis | 1 node/Redis | 3 nodes/etcd |",
  "|---|---:|---:|---:|---:|---:|---:|---:|",
  ( ["uncontended", "uncontended-pipelined", "hotkey-16"][] as $c |
    [["ticketing-pin", "ticketing1-pin", "redis-pin", "etcd-pin"][] as $s | $r | run($s; $c) | if . == null then null else rate($c) end] as $v |
    "| \($c) | " + ([$v[] | num] | join(" | ")) + " | \(ratio($v[0]; $v[2])) | \(ratio($v[1]; $v[2])) | \(ratio($v[0]; $v[3])) |" ),
  "",
  "| case | p50 / p99 / p99.9 / max ms: Ticketing 3 nodes | Ticketing 1 node | Redis | etcd (tmpfs) |",
  "|---|---|---|---|---|",
  ( ["uncontended", "uncontended-pipelined", "hotkey-16"][] as $c |
    "| \($c) | " + ([["ticketing-pin", "ticketing1-pin", "redis-pin", "etcd-pin"][] as $s | $r | run($s; $c) | lat] | join(" | ")) + " |" ),
  "" end ),
"## Acquire latency\n",
"Milliseconds, p50 / p99 / p99.9 / max, from the intended send time (open loop) or the send time (closed loop) to the grant. *half load* = open loop at half of that system'"'"'s own uncontended peak.\n",
"| case | Ticketing | etcd (tmpfs) | etcd (disk) | Redis |",
"|---|---|---|---|---|",
( ["uncontended", "uncontended-half", "uncontended-pipelined", "hotkey-1", "hotkey-16", "hotkey-64", "ticketdrop"][] as $c |
  [$sys[] as $s | $r | run($s; $c)] as $v |
  if ($v | map(select(. != null)) | length) == 0 then empty else
  "| \(if $c == "uncontended-half" then "uncontended, half load" else $c end) | " + ([$v[] | lat] | join(" | ")) + " |" end ),
"\nHalf-load offered rates (acquires/s): " + ([$sys[] as $s | $r | run($s; "uncontended-half") | select(. != null) | "\(.label) \(.rate_target | num) (achieved \(.grants_per_s | num), dropped arrivals \(.dropped))"] | join("; ")) + ".\n",
"## Ticket drop\n",
"| system | grants/s | timeouts/s | p50 ms | p99 ms | max ms | FIFO bypass max (mean) | checks |",
"|---|---:|---:|---:|---:|---:|---|---|",
( $sys[] as $s | $r | run($s; "ticketdrop") | select(. != null) |
  "| \($s) | \(.grants_per_s | num) | \(.timeouts_per_s | num) | \(.latency_us.p50 | ms) | \(.latency_us.p99 | ms) | \(.latency_us.max | ms) | \(.checks.bypass_max) (\(.checks.bypass_mean)) | \(chk) |" ),
"\n## Hot key fairness\n",
"Grants to other clients while one client waited (bypass), max (mean). With W clients that each wait for one grant at a time, FIFO allows at most W-1. Counted from the send of the acquire, a client whose acquire the server has not read yet (a starved thread) can see more without any unfairness, so the count is judged only in the *probe* run: Ticketing with a ping behind every acquire, which marks when the server read it (`--fifo-probe`).\n",
"| system | hotkey-16 | hotkey-64 | hotkey-64, probe (judged) | checks |",
"|---|---|---|---|---|",
( $sys[] as $s | [$r | run($s; "hotkey-16"), run($s; "hotkey-64"), run($s; "hotkey-64-fifo")] as $v |
  if ($v | map(select(. != null)) | length) == 0 then empty else
  "| \($s) | " + ([$v[] | if . == null then "–" else "\(.checks.bypass_max) (\(.checks.bypass_mean))" + (if .checks.fifo_checked then ", bound \(.checks.fifo_bound), over it: \(.checks.fifo_bypass)" else "" end) end] | join(" | ")) + " | " + ([$v[] | select(. != null) | chk] | join(", ")) + " |" end ),
"\n## Failover (kill -9 of the leader under load)\n",
"| system | longest gap without a grant | grants/s over the window | indeterminate acquires | unavailable answers | checks |",
"|---|---:|---:|---:|---:|---|",
( $sys[] as $s | $r | run($s; "failover") | select(. != null) |
  "| \($s) | \(.max_gap_ms) ms | \(.grants_per_s | num) | \(.indeterminate) | \(.unavailable) | \(chk) |" ),
"\n## Memory of the leader\n",
"| system | what | items | RSS before | RSS after | bytes per item | key + owner bytes | of which the Raft log, snapshot |",
"|---|---|---:|---:|---:|---:|---:|---:|",
( $r.runs[] | select(.scenario == "memory") |
  "| \(.label) | \(.memory.what) | \(.memory.items | num) | \(.memory.rss_before_kb | num) kB | \(.memory.rss_after_kb | num) kB | \(.memory.bytes_per_item | num) | \(.memory.key_bytes) + \(.memory.owner_bytes) | \(if .memory.raft_log_bytes != null and .memory.items > 0 and (.label | startswith("ticketing")) and .memory.what == "held_keys" then "\(.memory.raft_log_bytes / .memory.items | num) B, \((.memory.raft_snapshot_bytes // 0) / .memory.items | num) B" else "–" end) |" ),
"\n## Safety and errors, every run\n",
"| system | case | round | pairs | errors | indeterminate | double holder | token order | FIFO bypass over bound | checks |",
"|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
( $r.runs[] | "| \(.label) | \(.case) | \(.round // 1) | \(.pairs | num) | \(.errors) | \(.indeterminate) | \(.checks.double_holder) | \(.checks.token_order) | \(if .checks.fifo_checked then (.checks.fifo_bypass | tostring) else "n/a" end) | \(chk) |" ),
"\n## Charts\n",
"![throughput](\($base)-throughput.png)\n![latency](\($base)-latency.png)\n![failover](\($base)-failover.png)"
' --arg base "$BASE" "$IN" >"$OUT.md"

# ---- charts ---------------------------------------------------------------------------
jq -r "$JQ_LIB"'
. as $r |
( ["uncontended", "uncontended-pipelined", "hotkey-1", "hotkey-16", "hotkey-64", "ticketdrop"][] as $c |
  [$c] + [["ticketing", "etcd-tmpfs", "etcd-disk", "redis"][] as $s | $r | run($s; $c) |
          if . == null then "-" else (rate($c) | tostring) end] | join(" ") )
' "$IN" >"$TMP/throughput.dat"

jq -r "$JQ_LIB"'
. as $r |
( ["uncontended-half", "hotkey-64", "ticketdrop"][] as $c |
  ["ticketing", "etcd-tmpfs", "etcd-disk", "redis"][] as $s | $r | run($s; $c) | select(. != null) |
  "\"\($s)\\n\($c)\" \(.latency_us.p50 / 1000) \(.latency_us.p99 / 1000) \(.latency_us.p999 / 1000) \(.latency_us.max / 1000)" )
' "$IN" >"$TMP/latency.dat"

for s in ticketing etcd-tmpfs; do
    jq -r --arg s "$s" 'first(.runs[] | select(.label == $s and .case == "failover")) // empty |
        .timeline_100ms | to_entries[] | "\(.key / 10) \(.value * 10)"' "$IN" >"$TMP/fo-$s.dat"
done

gnuplot <<EOF
set terminal pngcairo size 1100,520 font "sans,10"
set datafile missing "-"

set output "$OUT-throughput.png"
set title "Grants per second (pairs/s for uncontended), log scale: higher is better"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set logscale y
set yrange [10:*]
set grid ytics
set key top right
set xtics noenhanced
plot "$TMP/throughput.dat" using 2:xtic(1) title "Ticketing (3 nodes)", \
     "" using 3 title "etcd (3, tmpfs)", "" using 4 title "etcd (3, disk)", \
     "" using 5 title "Redis (1, unreplicated)"

set output "$OUT-latency.png"
set title "Acquire latency (ms), log scale: lower is better"
set yrange [*:*]
set xtics noenhanced font "sans,8"
plot "$TMP/latency.dat" using 2:xtic(1) title "p50", "" using 3 title "p99", \
     "" using 4 title "p99.9", "" using 5 title "max"

set output "$OUT-failover.png"
set title "Grants per second (100 ms bins) around a kill -9 of the leader"
unset logscale y
set style data lines
set yrange [0:*]
set xlabel "seconds into the measurement"
set xtics font "sans,10"
set key outside top center horizontal
plot "$TMP/fo-ticketing.dat" using 1:2 with lines lw 2 title "Ticketing", \
     "$TMP/fo-etcd-tmpfs.dat" using 1:2 with lines lw 2 title "etcd (tmpfs)"
EOF
