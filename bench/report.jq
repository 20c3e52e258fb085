# jq definitions shared by bench/report.sh and bench/scale_report.sh: number
# formats, the better round of a run, ratios and latency cells.
def commas: tostring | [explode | reverse | _nwise(3) | reverse | implode] | reverse | join(",");
def num: if . == null then "–" elif . >= 100 then (round | commas)
         else ((. * 10 | round) / 10 | tostring) end;
def ms: if . == null then "–" else ((. / 100 | round) / 10 | tostring) end;
def rate(c): if (c | startswith("uncontended")) then .pairs_per_s else .grants_per_s end;
# The better round of a system (by throughput) when a case ran more than once.
def run(l; c): [.runs[] | select(.label == l and .case == c)] |
               if length == 0 then null else max_by(rate(c)) end;
def ratio(a; b): if a == null or b == null or b == 0 then "–"
                 else ((a / b * 10 | round) / 10) as $x
                 | ($x | tostring) + (if ($x | floor) == $x then ".0" else "" end) + "x" end;
def chk: if . == null then "–" elif .checks.ok then "ok" else "**FAILED**" end;
def lat: if . == null then "–"
         else [.latency_us.p50, .latency_us.p99, .latency_us.p999, .latency_us.max]
              | map(ms) | join(" / ") end;
