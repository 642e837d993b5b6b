#!/usr/bin/env bash
# PageRank on one rank against its own one-process reference, taking
# turns, medians over the rounds, with the ratio and the load average:
#
#	bench/pagerank/onerank.sh [ROUNDS] [VERTICES] [ITERATIONS]    # 5 100000 20
#
# It builds gaspirun and pagerank into a temporary directory. Run it on a
# quiet machine (load average below 1.5).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5} vertices=${2:-100000} iterations=${3:-20}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/gaspirun ./apps/pagerank/cmd/pagerank
args=(--vertices "$vertices" --iterations "$iterations")
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
ref=() one=()
for ((r = 0; r < rounds; r++)); do
	t0=$(date +%s%N)
	"$bin/pagerank" ref "${args[@]}" >/dev/null
	t1=$(date +%s%N)
	"$bin/gaspirun" -n 1 --quiet -- "$bin/pagerank" run "${args[@]}" >/dev/null 2>&1
	t2=$(date +%s%N)
	ref+=($(((t1 - t0) / 1000000))) one+=($(((t2 - t1) / 1000000)))
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
mr=$(median "${ref[@]}") mo=$(median "${one[@]}")
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pagerank ref: ${ref[*]} ms; median $mr ms"
echo "gaspirun -n 1 pagerank run: ${one[*]} ms; median $mo ms"
awk -v a="$mo" -v b="$mr" 'BEGIN {printf "1 rank / reference: %.2fx\n", a / b}'
