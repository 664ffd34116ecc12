#!/usr/bin/env bash
# Where the real-time seconds go (issue 24): runs the hot-range, hot-key and worker-loss e2e
# tests (real processes, real HTTP) RUNS times, gathers each fix's stage times (the
# `e2e-stages` lines the tests print, seconds from the hotspot's start in the testbed) and
# prints the median of each stage per scenario as a markdown table.
#
#   scripts/e2e-stages.sh [RUNS] [OUT.jsonl]     (default 5 runs, /tmp/e2e-stages.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
out="${2:-/tmp/e2e-stages.jsonl}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/lb-ci-target}"
# A copy of the test binary: the runs measure this build even if the tree is rebuilt meanwhile.
built=$(cargo test -p lb-launcher --test it --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it"][-1])')
bin=$(mktemp /tmp/e2e-stages-it.XXXXXX)
cp "$built" "$bin"
chmod +x "$bin"
trap 'rm -f "$bin"' EXIT
: >"$out"
for i in $(seq 1 "$runs"); do
  # A failed test prints no stage line: the count below shows it.
  (cd launcher && "$bin" --nocapture \
    e2e::a_hot_range_is_split e2e::a_single_hot_key_is_isolated e2e::a_lost_workers_load_is_moved 2>&1 || true) \
    | sed -n 's/^e2e-stages //p' >>"$out"
  echo "run $i of $runs: $(wc -l <"$out") stage lines so far" >&2
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
stages = ["onset", "detected", "proposed", "accepted", "started", "finished", "visible", "measured", "relieved", "test_relief"]
print("| scenario | runs | " + " | ".join(stages) + " |")
print("|---|---|" + "---|" * len(stages))
for case in ["hot-range", "hot-key", "worker-loss"]:
    got = [r for r in rows if r["case"] == case]
    cells = []
    for s in stages:
        v = [r[s] for r in got if s in r]
        cells.append(f"{statistics.median(v):.1f}" if v else "-")
    print(f"| {case} | {len(got)} | " + " | ".join(cells) + " |")
print()
print("(median seconds from the hotspot's start; `test_relief` is the test's own view: the first of 3 s with under 1 % rejected)")
PY
