#!/usr/bin/env bash
# bench.sh: the single-process Go in-memory sort (terasort memsort) against
# GNU sort, on the same gensort ASCII records, in the same run; every output
# is checked with `terasort validate --expect-records --expect-checksum`.
#
#   apps/terasort/bench.sh                       # 1 GiB: 10,737,418 records
#   TERASORT_RECORDS=1000000 apps/terasort/bench.sh
#
# Environment:
#   TERASORT_RECORDS  records to sort (default 10737418 = 1 GiB of records)
#   TERASORT_REPS     runs of each variant; the best and the median are shown (default 3)
#   TERASORT_THREADS  goroutines for the Go sort and --parallel for GNU sort (default 2)
#   TERASORT_DIR      work directory (default: a new directory under /tmp, removed at the end)
#   TERASORT_KEEP=1   keep the work directory
#
# Figures: MB = 10^6 bytes. "go-sort-cold" is the first SortInMemory of a
# run (records already in memory; the destination and scratch memory are
# touched for the first time, so page faults are included); "go-sort-warm"
# is the best of the next sorts on the same buffers (no faults); "go-total"
# is read + cold sort + write, comparable to GNU sort's wall time, which
# includes reading its input and writing its output. Input and outputs stay
# in the page cache (the input is read once before timing). CPU seconds
# (user+system) are shown too: on a shared machine they move less than wall
# time.
# The GNU command is
#   LC_ALL=C sort -S 50% --parallel=$TERASORT_THREADS -o OUT IN
# which sorts the 100-byte lines (key first, ending in "\r\n") in memory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
records=${TERASORT_RECORDS:-10737418}
reps=${TERASORT_REPS:-3}
threads=${TERASORT_THREADS:-2}
work=${TERASORT_DIR:-}
if [[ -z $work ]]; then
	work=$(mktemp -d /tmp/terasort-bench.XXXXXX)
	[[ ${TERASORT_KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
bin=$work/terasort
in=$work/in.dat
bytes=$((records * 100))

(cd "$here" && go build -o "$bin" ./cmd/terasort)
echo "# terasort bench: $records records ($bytes bytes), threads=$threads, reps=$reps, $(nproc) CPUs, $(uname -r)"
echo "# transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo n/a); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(sort --version | head -1); $(go version)"

want=$("$bin" gen --records "$records" --single --out "$in" --force --seed 1 --format ascii --quiet)
echo "# input: $want"
n=${want#records=}; n=${n%% *}
cs=${want##*checksum=}
cat "$in" >/dev/null # into the page cache

check() { # check FILE: the output must be sorted and hold the input's records
	local got
	got=$("$bin" validate --expect-records "$n" --expect-checksum "$cs" "$1" 2>&1) || {
		echo "FAIL: $1 does not validate:"
		echo "$got"
		exit 1
	}
}

declare -A times cpus
add() { times[$1]+="$2 "; }
addcpu() { cpus[$1]+="$2 "; }

for ((r = 1; r <= reps; r++)); do
	for huge in true false; do
		out=$("$bin" memsort --in "$in" --out "$work/go.dat" --threads "$threads" --huge="$huge" --repeat 3)
		echo "run $r: $out"
		check "$work/go.dat"
		field() { sed -E "s/.* $1=([0-9.]+)s.*/\\1/" <<<"$out"; }
		cpu() { sed -E "s/.* $1=[0-9.]+s \\([0-9]+ MB\\/s, cpu ([0-9.]+)s\\).*/\\1/" <<<"$out"; }
		add "go-sort-cold,huge=$huge" "$(field sort)"
		add "go-sort-warm,huge=$huge" "$(field warm_sort)"
		add "go-total,huge=$huge" "$(field total)"
		addcpu "go-sort-cold,huge=$huge" "$(cpu sort)"
		addcpu "go-sort-warm,huge=$huge" "$(cpu warm_sort)"
		addcpu "go-total,huge=$huge" "$(cpu total)"
	done
	rm -f "$work/gnu.dat"
	start=$(date +%s.%N)
	/usr/bin/time -f "%U %S" -o "$work/gnu.time" env LC_ALL=C sort -S 50% --parallel="$threads" -o "$work/gnu.dat" "$in"
	end=$(date +%s.%N)
	g=$(echo "$end - $start" | bc)
	c=$(awk '{print $1 + $2}' "$work/gnu.time")
	echo "run $r: gnu sort: wall=${g}s cpu=${c}s (user sys: $(cat "$work/gnu.time"))"
	check "$work/gnu.dat"
	add "gnu-sort" "$g"
	addcpu "gnu-sort" "$c"
done

echo "# results: wall seconds best / median of $reps, MB/s from the best; CPU seconds (user+sys) best / median"
printf '%-26s %10s %10s %10s %10s %10s\n' variant best median MB/s cpu-best cpu-median
for k in go-sort-cold,huge=true go-sort-cold,huge=false go-sort-warm,huge=true go-sort-warm,huge=false \
	go-total,huge=true go-total,huge=false gnu-sort; do
	stats() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[1], a[int((NR+1)/2)]}'; }
	read -r best med < <(stats "${times[$k]}")
	read -r cbest cmed < <(stats "${cpus[$k]}")
	printf '%-26s %10.3f %10.3f %10.0f %10.3f %10.3f\n' "$k" "$best" "$med" "$(echo "$bytes / 1000000 / $best" | bc -l)" "$cbest" "$cmed"
done
echo "all outputs validated: records=$n checksum=$cs"
