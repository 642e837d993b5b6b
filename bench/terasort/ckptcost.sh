#!/usr/bin/env bash
# ckptcost.sh: what TeraSort's key-count checkpoints cost, one run per
# variant on the same input, 4 ranks + 1 spare under gaspirun:
#
#   bench/terasort/ckptcost.sh
#   TERASORT_OLD=/tmp/old bench/terasort/ckptcost.sh   # also a build of another commit
#
# Variants: plain (no checkpoints), ckpt (default: spilled at each
# checkpoint), ckpt-mem (--ckpt-in-memory), and both across host labels
# (gaspirun --ranks-per-host 1, --spill DIR/%h: spill files copied to the
# holder's host). TERASORT_OLD names a directory holding gaspirun and
# terasort built from another commit; its plain, ckpt and ckpt-mem each
# run just before this build's, so that the pairs see similar load. Every
# output is validated against the input's checksum.
#
# Environment: TERASORT_RECORDS (default 1000000), TERASORT_CKPT (records
# per rank between checkpoints, default 100000), TERASORT_MEMORY (bytes,
# default: terasort's 256 MiB), TERASORT_DIR (work directory, default a
# new one under /tmp, removed at the end).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
records=${TERASORT_RECORDS:-1000000}
ckpt=${TERASORT_CKPT:-100000}
memory=${TERASORT_MEMORY:-}
work=${TERASORT_DIR:-}
if [[ -z $work ]]; then
	work=$(mktemp -d /tmp/terasort-ckpt.XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/bin"
(cd "$root" && go build -o "$work/bin/" ./cmd/gaspirun ./apps/terasort/cmd/terasort)
echo "# $(date -u +%FT%TZ) $(cd "$root" && git rev-parse --short HEAD) records=$records ckpt=$ckpt memory=${memory:-default} load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/bin/terasort" gen --records "$records" --out "$work/in" --quiet >/dev/null
want=$("$work/bin/terasort" sum "$work/in" | tail -1)
echo "# input: $want"
mem=()
[[ -n $memory ]] && mem=(--memory "$memory")

run() { # label, bin dir, gaspirun flags (one word or ""), sort flags...
	local label=$1 bin=$2 launch=$3
	shift 3
	rm -rf "$work/out" "$work/spill"
	local t0 t1 log got
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	log=$("$bin/gaspirun" -n 4 --spares 1 $launch -- "$bin/terasort" sort --in "$work/in" --out "$work/out" "${mem[@]}" "$@" 2>&1) || {
		t1=$(date +%s.%N)
		printf '%-16s FAILED after %.2f s: %s\n' "$label" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$(grep -m1 -o 'terasort sort: .*' <<<"$log" || tail -1 <<<"$log")"
		return
	}
	t1=$(date +%s.%N)
	got=$("$work/bin/terasort" validate "$work/out" 2>/dev/null | tail -1) || got="validate failed"
	[[ $got == "$want" ]] || got="WRONG: $got"
	awk -v l="$label" -v a="$t0" -v b="$t1" -v ok="$got" -v txt="$log" 'BEGIN {
		n = split(txt, lines, "\n"); rss = 0; cp = 0; ck = "-"
		for (i = 1; i <= n; i++) {
			if (match(lines[i], /checkpoints=[0-9]+ \([0-9.]+s\)/)) ck = substr(lines[i], RSTART, RLENGTH)
			if (match(lines[i], /rss_peak=[0-9]+/)) { v = substr(lines[i], RSTART + 9, RLENGTH - 9) + 0; if (v > rss) rss = v }
			if (match(lines[i], /copied_bytes=[0-9]+/)) cp += substr(lines[i], RSTART + 13, RLENGTH - 13)
		}
		printf "%-16s %7.2f s  %-22s rss_peak=%6.1f MB (largest rank)  copied=%7.1f MB  %s\n", l, b - a, ck, rss * 1024 / 1e6, cp / 1e6, (ok == "" ? "" : (ok ~ /^records/ ? "valid" : ok))
	}'
}

both() { # label, sort flags...: the other build first when given, then this one
	local label=$1
	shift
	if [[ -n ${TERASORT_OLD:-} ]]; then
		run "old-$label" "$TERASORT_OLD" "" "$@"
	fi
	run "$label" "$work/bin" "" "$@"
}
both plain
both ckpt --ckpt-records "$ckpt"
both ckpt-mem --ckpt-records "$ckpt" --ckpt-in-memory
run ckpt-hosts "$work/bin" "--ranks-per-host=1" --ckpt-records "$ckpt" --spill "$work/spill/%h"
run ckpt-mem-hosts "$work/bin" "--ranks-per-host=1" --ckpt-records "$ckpt" --ckpt-in-memory --spill "$work/spill/%h"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
