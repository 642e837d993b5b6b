#!/usr/bin/env bash
# run.sh: the distributed TeraSort figures of bench/RESULTS.md, every
# variant in the same run on the same input, so that their ratios hold on a
# shared machine whose absolute speed drifts.
#
#   bench/terasort/run.sh                          # 1 GiB (10,737,418 records)
#   TERASORT_RECORDS=2000000 bench/terasort/run.sh
#
# Variants (4 ranks + 1 spare under gaspirun, --memory as below):
#   plain        no checkpoints
#   ckpt         key-count checkpoints every TERASORT_CKPT records per rank
#                (spilled at each checkpoint: the default)
#   ckpt-mem     the same, checkpoints carrying the in-memory data (--ckpt-in-memory)
#   naive        no checkpoints, naive exchange order (--schedule naive)
#   kill         ckpt, and rank 2 SIGKILLed at half of its records
#   ckpt-hosts   ckpt with every process on its own host label and spill
#                directory (gaspirun --ranks-per-host 1, --spill DIR/%h):
#                checkpoints copy their spill files to the holder's host
#   kill-host    ckpt-hosts, and rank 2 removes its spill directory and is
#                SIGKILLed at half of its records: the spare fetches the
#                files from the holder
# and, single-process on the same records: terasort memsort (Go, in memory)
# and GNU sort (LC_ALL=C sort -S 50% --parallel=2).
# Every output is validated against the input's count and checksum.
#
# Each line gives the best of TERASORT_REPS runs: wall time, MB/s, and the
# CPU time of all the run's processes (GNU time over gaspirun, which waits
# for its processes), also per GiB sorted. Each run waits for a quiet
# machine first (quiet.sh: load average below TERASORT_MAXLOAD, default
# 1.5); its line shows the load it started at, and LOADED if it never got
# below. Needs GNU time (/usr/bin/time).
#
# Environment: TERASORT_RECORDS (default 10737418), TERASORT_MEMORY (bytes
# per rank, default 67108864), TERASORT_CKPT (default 500000), TERASORT_REPS
# (runs per variant, best shown, default 1), TERASORT_DIR (work directory,
# default a new one under /tmp, removed at the end).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/terasort/quiet.sh"
records=${TERASORT_RECORDS:-10737418}
memory=${TERASORT_MEMORY:-67108864}
ckpt=${TERASORT_CKPT:-500000}
reps=${TERASORT_REPS:-1}
work=${TERASORT_DIR:-}
if [[ -z $work ]]; then
	work=$(mktemp -d /tmp/terasort-dist.XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/bin"
(cd "$root" && go build -o "$work/bin/" ./cmd/gaspirun ./apps/terasort/cmd/terasort)
ts=$work/bin/terasort
run=$work/bin/gaspirun

echo "# $(date -u +%FT%TZ) records=$records memory=$memory ckpt=$ckpt reps=$reps load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$ts" gen --records "$records" --out "$work/in" --quiet >/dev/null
want=$("$ts" sum "$work/in" | tail -1)
echo "# input: $want"
mb=$(awk -v r="$records" 'BEGIN{printf "%.1f", r*100/1e6}')
gib=$(awk -v r="$records" 'BEGIN{printf "%.4f", r*100/1073741824}')

now() { date +%s.%N; }
check() { # dir label
	local got
	got=$("$ts" validate "$1"/part-* 2>/dev/null | tail -1) || { echo "$2: validate failed" >&2; exit 1; }
	[[ $got == "$want" ]] || { echo "$2: got '$got', want '$want'" >&2; exit 1; }
}

declare -A best bestcpu bestload
# keep name wall cpu: the best (least wall) run of a variant so far
keep() {
	if [[ -z ${best[$1]:-} ]] || awk -v x="$2" -v y="${best[$1]}" 'BEGIN{exit !(x<y)}'; then
		best[$1]=$2 bestcpu[$1]=$3 bestload[$1]="$load$loaded"
	fi
}
# line name: the variant's figures
line() {
	printf '%-10s %8.2f s %8.1f MB/s  cpu %6.2f s (%5.2f s/GiB, all processes)  load %s\n' "$1" "${best[$1]}" \
		"$(awk -v m="$mb" -v s="${best[$1]}" 'BEGIN{print m/s}')" "${bestcpu[$1]}" \
		"$(awk -v c="${bestcpu[$1]}" -v g="$gib" 'BEGIN{print c/g}')" "${bestload[$1]}"
}
variant() { # name, sort flags...
	local name=$1
	shift
	for _ in $(seq "$reps"); do
		rm -rf "$work/out"
		local t0 t1 log
		quiet
		t0=$(now)
		log=$(/usr/bin/time -f '%U %S' -o "$work/cpu" "$run" -n 4 --spares 1 ${launch:-} -- "$ts" sort --in "$work/in" --out "$work/out" --memory "$memory" "$@" 2>&1) || { echo "$name failed:"; echo "$log"; exit 1; }
		t1=$(now)
		check "$work/out" "$name"
		keep "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" "$(awk '{printf "%.2f", $1+$2}' "$work/cpu")"
		if [[ $name == kill* ]]; then
			grep -o 'rolled back to checkpoint [0-9]* (records sent per rank) \(in\|after\) [0-9.]*[mµ]*s' <<<"$log" | head -1 | sed "s/^/#   $name: /"
		fi
		grep -o 'checkpoints=[0-9]* ([0-9.]*s)' <<<"$log" | head -1 | sed "s/^/#   $name: /"
		grep -o 'copied_bytes=[0-9]* held_bytes=[0-9]* fetched_bytes=[0-9]*' <<<"$log" | awk -v n="$name" '
			{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] } }
			END { if (v["copied_bytes"] + v["fetched_bytes"] > 0) printf "#   %s: copied %.1f MB to holders, fetched %.1f MB (all ranks)\n", n, v["copied_bytes"]/1e6, v["fetched_bytes"]/1e6 }'
		# The ranks' own peak figures: the shuffle's accounted memory and the
		# process's resident set (VmHWM), largest over the ranks.
		grep -o 'spills=[0-9]* .*rss_peak=[0-9]*kB' <<<"$log" | awk -v n="$name" '
			{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			  sub(/kB/, "", v["rss_peak"])
			  if (v["rss_peak"] + 0 > rss) rss = v["rss_peak"] + 0
			  if (v["memory_peak"] + 0 > mem) mem = v["memory_peak"] + 0
			  sp += v["spills"] }
			END { if (NR) printf "#   %s: spills=%d (all ranks) memory_peak=%.1f MB rss_peak=%.1f MB (largest rank)\n", n, sp, mem/1e6, rss*1024/1e6 }'
	done
	line "$name"
}

single() { # name, command...
	local name=$1
	shift
	for _ in $(seq "$reps"); do
		local t0 t1
		quiet
		t0=$(now)
		/usr/bin/time -f '%U %S' -o "$work/cpu" "$@" >/dev/null 2>&1
		t1=$(now)
		keep "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" "$(awk '{printf "%.2f", $1+$2}' "$work/cpu")"
	done
	line "$name"
}

cat "$work"/in/part-* >"$work/in.dat"
single gnu-sort env LC_ALL=C sort -S 50% --parallel=2 -o "$work/gnu.dat" "$work/in.dat"
"$ts" validate --expect-records "$records" "$work/gnu.dat" >/dev/null 2>&1
single memsort "$ts" memsort --in "$work/in" --out "$work/mem.dat"
"$ts" validate --expect-records "$records" "$work/mem.dat" >/dev/null 2>&1
rm -f "$work/in.dat" "$work/gnu.dat" "$work/mem.dat"

variant plain
variant ckpt --ckpt-records "$ckpt"
variant ckpt-mem --ckpt-records "$ckpt" --ckpt-in-memory
variant naive --schedule naive
variant kill --ckpt-records "$ckpt" --inject kill:rank=2,at=0.5
launch="--ranks-per-host 1"
variant ckpt-hosts --ckpt-records "$ckpt" --spill "$work/spill/%h"
variant kill-host --ckpt-records "$ckpt" --spill "$work/spill/%h" --inject kill:rank=2,at=0.5,disk=lost
launch=

ratio() { awk -v a="${best[$1]}" -v b="${best[$2]}" 'BEGIN{printf "%.3f", a/b}'; }
echo "# ratios (wall time, same run):"
echo "ckpt/plain      $(ratio ckpt plain)   (key-count checkpoint overhead, spilled)"
echo "ckpt-mem/plain  $(ratio ckpt-mem plain)   (checkpoints carrying the in-memory data)"
echo "naive/plain     $(ratio naive plain)   (naive exchange order against diagonal)"
echo "kill/ckpt       $(ratio kill ckpt)   (one SIGKILL at 50%, recovered)"
echo "ckpt-hosts/plain $(ratio ckpt-hosts plain)   (checkpoints copying spill files to another host)"
echo "kill-host/ckpt-hosts $(ratio kill-host ckpt-hosts)   (a host lost with its disk at 50%, recovered)"
echo "plain/gnu-sort  $(ratio plain gnu-sort)"
echo "plain/memsort   $(ratio plain memsort)"
echo "gnu-sort/plain  $(ratio gnu-sort plain)   (the speed-up over GNU sort: its wall time over plain's)"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
