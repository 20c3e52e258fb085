#!/usr/bin/env bash
# Turns a results file of bench/scale.sh into Markdown tables and PNG charts.
#
#   bench/scale_report.sh RESULTS.json OUT_PREFIX
#
# Writes OUT_PREFIX.md, OUT_PREFIX-held.png, OUT_PREFIX-conns.png and
# OUT_PREFIX-gaps.png. Needs jq and gnuplot. Each system's figures are
# compared with its own at the smallest point (1,000 held keys, 64
# connections), and Ticketing's with Redis's and etcd's at the same point.
set -euo pipefail
IN=$1
OUT=$2
BASE=$(basename "$OUT")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

JQ_LIB=$(cat "$(dirname "$0")/report.jq")
# shellcheck disable=SC2016 # jq's $variables, not the shell's
JQ_LIB+='
# The better round (by pairs/s) of a system at one case.
def best(l; c): [.runs[] | select(.label == l and .case == c)] |
                if length == 0 then null else max_by(.pairs_per_s) end;
def x2(a; b): if a == null or b == null or b == 0 then "–"
              else ((a / b * 100 | round) / 100 | tostring) + "x" end;
def p99: if . == null then null else .latency_us.p99 end;
def pps: if . == null then null else .pairs_per_s end;
def systems: [["ticketing", "Ticketing"], ["redis", "Redis"], ["etcd-tmpfs", "etcd"]];
# The points (held keys or connections) that some system ran, in order.
def points(prefix; field): [.runs[] | select(.case | startswith(prefix)) | .[field]] | unique;
def sweep(prefix; field; what; unit):
  . as $r | points(prefix; field) as $pts | ($pts[0]) as $p0 |
  def cell(l; p): $r | best(l; prefix + (p | tostring));
  "| \(what) | Ticketing \(unit) | vs \($p0 | commas) | Redis \(unit) | vs \($p0 | commas) | etcd \(unit) | vs \($p0 | commas) | Ticketing/Redis | Ticketing/etcd |",
  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ( $pts[] as $p |
    [systems[] as $s | cell($s[0]; $p)] as $v |
    [systems[] as $s | cell($s[0]; $p0)] as $v0 |
    if unit == "pairs/s" then
      "| \($p | commas) | " +
      ([range(0; 3) as $i | ($v[$i] | pps | num), x2($v[$i] | pps; $v0[$i] | pps)] | join(" | ")) +
      " | \(x2($v[0] | pps; $v[1] | pps)) | \(x2($v[0] | pps; $v[2] | pps)) |"
    else
      "| \($p | commas) | " +
      ([range(0; 3) as $i | ($v[$i] | p99 | ms), x2($v[$i] | p99; $v0[$i] | p99)] | join(" | ")) +
      " | \(x2($v[0] | p99; $v[1] | p99)) | \(x2($v[0] | p99; $v[2] | p99)) |"
    end );
# The longest gap between grants and the slowest acquire, per system and point.
def stalls(prefix; field; what):
  . as $r | points(prefix; field) as $pts |
  def cell(l; p): $r | best(l; prefix + (p | tostring));
  "| \(what) | Ticketing gap ms | max ms | Redis gap ms | max ms | etcd gap ms | max ms |",
  "|---:|---:|---:|---:|---:|---:|---:|",
  ( $pts[] as $p |
    "| \($p | commas) | " +
    ([systems[] as $s | cell($s[0]; $p) |
      if . == null then "–", "–" else (.max_gap_ms | num), (.latency_us.max | ms) end] | join(" | ")) +
    " |" );
def size: if . == null then "–" elif . >= 1048576 then "\(. / 1048576 * 10 | round / 10) MiB"
          else "\(. / 1024 * 10 | round / 10) KiB" end;
'

jq -r "$JQ_LIB"'
. as $r | .meta as $m |
"# Cost at scale, \($m.date), commit \($m.commit)\n",
"Command: `\($m.command)` (\(if $m.quick then "quick" else "full" end) mode, \($m.elapsed_s) s; parts: \($m.parts | join(", "))). \(if $m.rounds > 1 then "The two sweeps ran in \($m.rounds) rounds (fresh servers each); each cell is the better round of that system, the JSON has both." else "One round." end)",
"Machine: \($m.machine.cores) cores (\($m.machine.cpu)), \($m.machine.memory), kernel \($m.machine.kernel); shared with other work (load average at the end: \($m.machine.loadavg_at_end)). Servers and load generator on the same machine, 127.0.0.1 only; absolute figures are noisy, the ratios within one run are the ones to read.",
"Versions: \($m.versions.etcd); Redis \($m.versions.redis). Setup: Ticketing \($m.setup.ticketing); etcd \($m.setup.etcd); Redis \($m.setup.redis); \($m.setup.bench). Open-file limit: \($m.nofile).\n",
( $m.notes[] | "- \(.)" ),
"",
( if ([.runs[] | select(.case | startswith("held-"))] | length) == 0 then empty else
  "## 1. Held keys\n",
  "The uncontended load (\($m.params.conns) connections, each client its own key: acquire, release, again) while other keys are held: filled first with the memory scenario (acquired with a \($m.params.hold_lease_ms / 1000) s lease, never released), fresh servers for each point. *vs* = that system over its own figure at the smallest point; Ticketing/Redis and Ticketing/etcd compare the same point (for p99, below 1 is better).\n",
  "Pairs per second:\n",
  sweep("held-"; "held_keys"; "held keys"; "pairs/s"),
  "\nAcquire p99 (ms):\n",
  sweep("held-"; "held_keys"; "held keys"; "p99 ms"),
  "\nThe longest time without any grant seen by the load generator (1 ms bins) and the slowest acquire, same runs: a stall of the server (a snapshot, a pause) shows here before it moves the p99.\n",
  stalls("held-"; "held_keys"; "held keys"),
  "" end ),
( if ([.runs[] | select(.case | startswith("conns-"))] | length) == 0 then empty else
  "## 2. Connections\n",
  "The same uncontended load over more connections, one client each, closed loop (wait \($m.params.conns_wait_ms) ms, so that queueing is not counted as a timeout); one fresh server per system for the whole sweep. In a closed loop the latency of C clients is about C / throughput: at 16,384 clients a p99 near a second is the queue, not a stall.\n",
  "Pairs per second:\n",
  sweep("conns-"; "connections"; "connections"; "pairs/s"),
  "\nAcquire p99 (ms):\n",
  sweep("conns-"; "connections"; "connections"; "p99 ms"),
  "\nLongest gap between grants and slowest acquire:\n",
  stalls("conns-"; "connections"; "connections"),
  "\nSetup: seconds from the first connect to the last connection ready (handshake and M redirect for Ticketing, a lease for etcd), and the Ticketing connections that the nodes closed in their handshake to admit newer ones (`--max-handshakes`, default 1024) or refused (`--max-connections`):\n",
  "| connections | Ticketing setup s | handshakes evicted | refused | bench reconnects (M redirects included) | Redis setup s | etcd setup s |",
  "|---:|---:|---:|---:|---:|---:|---:|",
  ( points("conns-"; "connections")[] as $c |
    [$r | best("ticketing"; "conns-\($c)"), best("redis"; "conns-\($c)"), best("etcd-tmpfs"; "conns-\($c)")] as $v |
    "| \($c | commas) | \($v[0].setup_s // null | num) | \($v[0].server.handshakes_evicted // null | num) | \($v[0].server.conns_rejected // null | num) | \($v[0].reconnects // null | num) | \($v[1].setup_s // null | num) | \($v[2].setup_s // null | num) |" ),
  "" end ),
( [.runs[] | select(.case | startswith("snapshot-"))] as $sn |
  if ($sn | length) == 0 then empty else
  "## 3. Snapshot under load (Ticketing only)\n",
  "\($m.params.snapshot_load_s) s of the uncontended load (\($m.params.conns) connections) on a fresh cluster, with no held keys and with \($m.params.big | commas); every node cuts a snapshot, incrementally and between its requests, once a quarter of `--max-log-entries` (16,384 entries by default) has been applied since the last one and those entries hold a quarter of its bytes, and at half of `--max-log-entries` in any case; each cut lists every held key. *Longest gap* is the longest time without any grant seen by the load generator (1 ms bins); snapshots are counted on the leader over the whole run (warmup and drain included). Redis and etcd are not measured here: Redis runs without persistence in these benchmarks, and etcd compacts on its own schedule.\n",
  "| held keys | pairs/s | p50 / p99 / p99.9 / max ms | longest gap ms | snapshots cut | last snapshot | leader changed | checks |",
  "|---:|---:|---|---:|---:|---:|---|---|",
  ( $sn | sort_by(.held_keys)[] |
    "| \(.held_keys | commas) | \(.pairs_per_s | num) | \(lat) | \(.max_gap_ms) | \(.snapshots_taken // null | num) | \(.snapshot_bytes | size) | \(if .leader_changed then "**yes**" else "no" end) | \(chk) |" ),
  ( ($sn | map(select(.held_keys == 0)) | first) as $a | ($sn | map(select(.held_keys > 0)) | first) as $b |
    if $a == null or $b == null then empty else
    "| ratio | \(x2($b.pairs_per_s; $a.pairs_per_s)) | p99 \(x2($b.latency_us.p99; $a.latency_us.p99)) | \(x2($b.max_gap_ms; $a.max_gap_ms)) | | | | |" end ),
  "" end ),
( if (.rejoin | length) == 0 then empty else
  ([.rejoin[] | .held_keys_asked] | unique) as $hs | ($hs[0]) as $h0 | ($hs[-1]) as $h1 |
  def row(k; n): [$r.rejoin[] | select(.held_keys_asked == $h0 and .kind == k)][n] as $a |
                 [$r.rejoin[] | select(.held_keys_asked == $h1 and .kind == k)][n] as $b | [$a, $b];
  "## 4. Rolling restart with held keys (Ticketing only)\n",
  "`bench/rejoin.sh` on a fresh cluster, with \($h0 | commas) and with \($h1 | commas) held keys: first each follower is killed (`kill -9`) and restarted as a fresh process at its address, then a rolling restart under load (SIGTERM, restart, wait for `/readyz`; followers first, the leader last, \($m.params.rolling_load_s) s of the failover load per step, the restart 3 s in). *Ready* = ms from the restart to `/readyz` 200 (a caught-up voter); *gap* = the longest time without a grant during that step.\n",
  "| step | ready ms, \($h0 | commas) held | ready ms, \($h1 | commas) held | ratio | gap ms, \($h0 | commas) held | gap ms, \($h1 | commas) held | ratio |",
  "|---|---:|---:|---:|---:|---:|---:|",
  ( range(0; [$r.rejoin[] | select(.kind == "rejoin" and .held_keys_asked == $h0)] | length) as $i |
    row("rejoin"; $i) as $p |
    "| kill -9 of follower \($i + 1), restart | \($p[0].ready_ms | num) | \($p[1].ready_ms // null | num) | \(x2($p[1].ready_ms; $p[0].ready_ms)) | – | – | – |" ),
  ( range(0; [$r.rejoin[] | select(.kind == "rolling" and .held_keys_asked == $h0)] | length) as $i |
    row("rolling"; $i) as $p |
    "| rolling step \($p[0].step): the \($p[0].role) | \($p[0].ready_ms | num) | \($p[1].ready_ms // null | num) | \(x2($p[1].ready_ms; $p[0].ready_ms)) | \($p[0].max_gap_ms // null | num) | \($p[1].max_gap_ms // null | num) | \(x2($p[1].max_gap_ms; $p[0].max_gap_ms)) |" ),
  "",
  ( $hs[] as $h | [$r.rejoin[] | select(.held_keys_asked == $h)] as $l |
    ($l | map(select(.kind == "check")) | first) as $c |
    "- \($h | commas) held keys: " +
    (if $c == null then "**no final check** (bench/rejoin.sh exited \($l[0].exit // "?"))"
     else "held keys \($c.held_before | num) before, \($c.held_after | num) after every step, domain \(if $c.domain_kept then "kept" else "**changed**" end), bench/rejoin.sh exited \($c.exit)" end) ),
  "" end ),
( [systems[] as $s | [$r.runs[] | select(.label == $s[0] and .scenario == "memory" and (.case | startswith("fill-")))] | max_by(.memory.items) // empty | {name: $s[1], run: .}] as $mem |
  if ($mem | length) == 0 then empty else
  "## 5. Memory per held key\n",
  "From the largest fill of each system in section 1: the resident memory of the leader (Redis: the process) before and after holding the keys, over their number. Key names and owners are what the bench sent; *beyond* is what the server spends on a held key besides those bytes (for Ticketing, its Raft log and latest snapshot included: they are in memory too).\n",
  "| system | held keys | fill s | RSS before | RSS after | bytes per key | key + owner bytes | beyond key + owner |",
  "|---|---:|---:|---:|---:|---:|---:|---:|",
  ( $mem[] | .run.memory as $x |
    "| \(.name) | \($x.items | commas) | \(.run.duration_s | num) | \($x.rss_before_kb | num) kB | \($x.rss_after_kb | num) kB | \($x.bytes_per_item | num) | \($x.key_bytes) + \($x.owner_bytes) | \($x.bytes_per_item - $x.key_bytes - $x.owner_bytes | num) |" ),
  "" end ),
"## Safety and errors, every run\n",
"| system | case | round | pairs | errors | timeouts | indeterminate | reconnects | double holder | token order | checks | exit |",
"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
( $r.runs[] | "| \(.label) | \(.case) | \(.round) | \(if .scenario == "memory" then "\(.memory.items | num) held" else (.pairs | num) end) | \(.errors) | \(.timeouts) | \(.indeterminate) | \(.reconnects) | \(.checks.double_holder) | \(.checks.token_order) | \(chk) | \(.exit) |" )
' "$IN" >"$OUT.md"

# ---- charts ---------------------------------------------------------------------------
# Columns: point, then pairs/s and p99 (ms) of Ticketing, Redis, etcd ("-": not run).
sweep_dat() { # CASE_PREFIX FIELD
    jq -r "$JQ_LIB"'
    . as $r | points($p; $f)[] as $x |
    [$x] + ([systems[] as $s | $r | best($s[0]; $p + ($x | tostring)) |
             if . == null then "-" else .pairs_per_s end] +
            [systems[] as $s | $r | best($s[0]; $p + ($x | tostring)) |
             if . == null then "-" else .latency_us.p99 / 1000 end]) | map(tostring) | join(" ")
    ' --arg p "$1" --arg f "$2" "$IN"
}
sweep_dat held- held_keys >"$TMP/held.dat"
sweep_dat conns- connections >"$TMP/conns.dat"
# Longest gap (ms): label, without held keys, with them.
jq -r '
  . as $r |
  ([.runs[] | select(.case | startswith("snapshot-"))] | sort_by(.held_keys)) as $s |
  (if ($s | length) == 2 then "\"snapshot,\\n\(.meta.params.snapshot_load_s) s load\" \($s[0].max_gap_ms) \($s[1].max_gap_ms)" else empty end),
  ([.rejoin[] | .held_keys_asked] | unique) as $hs |
  ( [.rejoin[] | select(.kind == "rolling" and .held_keys_asked == $hs[0])][] as $a |
    ([$r.rejoin[] | select(.kind == "rolling" and .held_keys_asked == $hs[-1] and .step == $a.step)] | first) as $b |
    "\"rolling step \($a.step),\\n\($a.role)\" \($a.max_gap_ms // "-") \(if $b == null then "-" else ($b.max_gap_ms // "-") end)" )
' "$IN" >"$TMP/gaps.dat"
BIG=$(jq -r '.meta.params.big | tostring | [explode | reverse | _nwise(3) | reverse | implode] | reverse | join(",")' "$IN")

PRE='set terminal pngcairo size 1100,460 font "sans,10"
set datafile missing "-"
set grid
set key top left'
# sweep_png NAME TITLE XLABEL XRANGE: pairs/s and p99 side by side, if any ran.
sweep_png() {
    [[ -s "$TMP/$1.dat" ]] || return 0
    gnuplot <<EOF
$PRE
set output "$OUT-$1.png"
set style data linespoints
set logscale xy
set format x "%.0s%c"
set xrange [$4]
set multiplot layout 1,2 title "$2"
set xlabel "$3"
set title "pairs per second (higher is better)"
plot "$TMP/$1.dat" using 1:2 lw 2 title "Ticketing (3 nodes)", "" using 1:3 lw 2 title "Redis (1)", \
     "" using 1:4 lw 2 title "etcd (3, tmpfs)"
set title "acquire p99, ms (lower is better)"
plot "$TMP/$1.dat" using 1:5 lw 2 title "Ticketing (3 nodes)", "" using 1:6 lw 2 title "Redis (1)", \
     "" using 1:7 lw 2 title "etcd (3, tmpfs)"
unset multiplot
EOF
}
sweep_png held "Uncontended load (64 connections) with other keys held" "held keys" "500:2000000"
sweep_png conns "Uncontended load over more connections (one client each, closed loop)" \
    connections "40:25000"
if [[ -s "$TMP/gaps.dat" ]]; then
    gnuplot <<EOF
$PRE
set output "$OUT-gaps.png"
set title "Ticketing: longest gap between grants (ms), without and with $BIG held keys"
set bmargin 4
set logscale y
set yrange [1:*]
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set xtics noenhanced
plot "$TMP/gaps.dat" using 2:xtic(1) title "no held keys", "" using 3 title "$BIG held keys"
EOF
fi

# The charts that were drawn (a run of some parts only has fewer).
{
    printf '\n## Charts\n\n'
    for c in held conns gaps; do
        if [[ -s "$OUT-$c.png" ]]; then printf '![%s](%s-%s.png)\n' "$c" "$BASE" "$c"; fi
    done
} >>"$OUT.md"
