#!/usr/bin/env bash
# pairs.sh: what key-count checkpoints and a kill cost, in paired runs:
# each round runs plain (no checkpoints), ckpt (checkpoints every
# TERASORT_CKPT records per rank) and kill (ckpt, rank 2 SIGKILLed at half
# its records) back to back on the same input, 4 ranks + 1 spare under
# gaspirun, so that each ratio compares runs that saw the same load. The
# order inside a round rotates. Every output is validated against the
# input's count and checksum, and every kill run's part files must be
# byte for byte the failure-free ones (cmp).
#
#   bench/terasort/pairs.sh                          # 1 GiB, 5 rounds
#   TERASORT_RECORDS=2684354 TERASORT_MEMORY=16777216 TERASORT_CKPT=125000 bench/terasort/pairs.sh
#
# Prints every run (wall time, CPU time of all its processes, rank 0's
# checkpoint figures) and the medians of the per-round ratios ckpt/plain
# and kill/ckpt, of wall time and of CPU time (which a shared machine's
# load moves less). Needs GNU time (/usr/bin/time).
#
# Each run waits for a quiet machine first (quiet.sh: load average below
# TERASORT_MAXLOAD, default 1.5) and prints the load it started at.
#
# Environment: TERASORT_RECORDS (default 10737418), TERASORT_MEMORY (bytes
# per rank, default 67108864), TERASORT_CKPT (default 500000),
# TERASORT_ROUNDS (default 5), TERASORT_DIR (work directory, default a new
# one under /tmp, removed at the end), TERASORT_MAXLOAD and
# TERASORT_QUIETWAIT (quiet.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/terasort/quiet.sh"
records=${TERASORT_RECORDS:-10737418}
memory=${TERASORT_MEMORY:-67108864}
ckpt=${TERASORT_CKPT:-500000}
rounds=${TERASORT_ROUNDS:-5}
work=${TERASORT_DIR:-}
if [[ -z $work ]]; then
	work=$(mktemp -d /tmp/terasort-pairs.XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/bin"
(cd "$root" && go build -o "$work/bin/" ./cmd/gaspirun ./apps/terasort/cmd/terasort)
ts=$work/bin/terasort
echo "# $(date -u +%FT%TZ) $(cd "$root" && git rev-parse --short HEAD) records=$records memory=$memory ckpt=$ckpt rounds=$rounds load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$ts" gen --records "$records" --out "$work/in" --quiet >/dev/null
want=$("$ts" sum "$work/in" | tail -1)
echo "# input: $want"

run() { # name -> sets $took; output in $work/out-$name
	local name=$1 extra=()
	case $name in
	ckpt) extra=(--ckpt-records "$ckpt") ;;
	kill) extra=(--ckpt-records "$ckpt" --inject kill:rank=2,at=0.5) ;;
	esac
	rm -rf "$work/out-$name"
	local t0 t1 log got
	quiet
	t0=$(date +%s.%N)
	log=$(/usr/bin/time -f '%U %S' -o "$work/cpu" "$work/bin/gaspirun" -n 4 --spares 1 -- "$ts" sort --in "$work/in" --out "$work/out-$name" --memory "$memory" "${extra[@]}" 2>&1) || {
		echo "$name failed:"
		echo "$log"
		exit 1
	}
	t1=$(date +%s.%N)
	got=$("$ts" validate "$work/out-$name" 2>/dev/null | tail -1) || { echo "$name: validate failed" >&2; exit 1; }
	[[ $got == "$want" ]] || { echo "$name: got '$got', want '$want'" >&2; exit 1; }
	took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
	cpu=$(awk '{printf "%.2f", $1+$2}' "$work/cpu")
	printf '%-6s %8.3f s  cpu %6.2f s  load %s%s  %s %s\n' "$name" "$took" "$cpu" "$load" "$loaded" "$(grep -o 'checkpoints=[0-9]* ([0-9.]*s) ckpt_background=[0-9.]*s' <<<"$log" | head -1)" \
		"$(grep -o 'rolled back to checkpoint [0-9]* (records sent per rank) \(in\|after\) [0-9.]*[mµ]*s' <<<"$log" | head -1)"
}

cp_ratios=() kc_ratios=() cp_cpu=() kc_cpu=()
order=(plain ckpt kill)
for r in $(seq "$rounds"); do
	echo "# round $r, load: $(cut -d' ' -f1-3 /proc/loadavg)"
	declare -A t=() c=()
	for k in 0 1 2; do
		name=${order[$(((k + r) % 3))]}
		run "$name"
		t[$name]=$took c[$name]=$cpu
	done
	for p in 0 1 2 3; do
		cmp -s "$work/out-plain/part-0000$p" "$work/out-kill/part-0000$p" || { echo "kill: part $p differs from the failure-free run" >&2; exit 1; }
	done
	cp_ratios+=("$(awk -v a="${t[ckpt]}" -v b="${t[plain]}" 'BEGIN{printf "%.4f", a/b}')")
	kc_ratios+=("$(awk -v a="${t[kill]}" -v b="${t[ckpt]}" 'BEGIN{printf "%.4f", a/b}')")
	cp_cpu+=("$(awk -v a="${c[ckpt]}" -v b="${c[plain]}" 'BEGIN{printf "%.4f", a/b}')")
	kc_cpu+=("$(awk -v a="${c[kill]}" -v b="${c[ckpt]}" 'BEGIN{printf "%.4f", a/b}')")
	echo "# round $r: ckpt/plain ${cp_ratios[-1]} kill/ckpt ${kc_ratios[-1]} (kill output byte-identical)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{if (NR%2) print v[(NR+1)/2]; else printf "%.4f\n", (v[NR/2]+v[NR/2+1])/2}'; }
echo "ckpt/plain median $(median "${cp_ratios[@]}")   (${cp_ratios[*]})"
echo "kill/ckpt  median $(median "${kc_ratios[@]}")   (${kc_ratios[*]})"
echo "cpu ckpt/plain median $(median "${cp_cpu[@]}")   (${cp_cpu[*]})"
echo "cpu kill/ckpt  median $(median "${kc_cpu[@]}")   (${kc_cpu[*]})"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
