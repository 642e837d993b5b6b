#!/usr/bin/env bash
# apps.sh: K-means and TeraSort on this host over TCP loopback (PGAS_SHM=0),
# over the shared-memory rings with private segments (PGAS_SHM=1
# PGAS_SHM_SEGMENTS=0) and with segments in shared memory (the default,
# PGAS_SHM_SEGMENTS=1: direct writes), taking turns in the same run, with
# the result checksums of all three (they must be equal).
#
#   bench/shm/apps.sh                        # 3 rounds
#   SHM_ROUNDS=5 SHM_RECORDS=2000000 bench/shm/apps.sh
#
# K-means: 4 ranks, SHM_POINTS points (default 1000000), 10-D, k=100,
# 20 iterations, no checkpoints; the figure is the median per-iteration
# time of rank 0 (its "time=" field). Recovery: the README's job (a spare,
# rank 2 SIGKILLed after iteration 15), rank 0's time from the failure to
# the restored checkpoint. TeraSort: 4 ranks, SHM_RECORDS
# records (default 1000000); the figure is records*100 bytes over the
# wall time of "terasort sort", in MB/s; its output is validated.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${SHM_ROUNDS:-3}
points=${SHM_POINTS:-1000000}
records=${SHM_RECORDS:-1000000}
work=$(mktemp -d /tmp/shm-apps.XXXXXX)
trap 'rm -rf "$work"' EXIT

cd "$root"
go build -o "$work/bin/" ./cmd/gaspirun ./apps/kmeans/cmd/kmeans ./apps/terasort/cmd/terasort
bin=$work/bin
"$bin/terasort" gen --records "$records" --out "$work/in" --parts 4 >/dev/null 2>&1

# envOf prints the environment of a setting: tcp, ring or seg.
envOf() {
	case $1 in
	tcp) echo "PGAS_SHM=0" ;;
	ring) echo "PGAS_SHM=1 PGAS_SHM_SEGMENTS=0" ;;
	seg) echo "PGAS_SHM=1 PGAS_SHM_SEGMENTS=1" ;;
	esac
}

kmeans() { # $1: setting
	local out
	out=$(env $(envOf "$1") "$bin/gaspirun" -n 4 --quiet -- "$bin/kmeans" --generate "$points" --dim 10 --k 100 \
		--seed 7 --max-iter 20 --tol 0 --ckpt-every 0 2>/dev/null)
	local med sum
	med=$(grep ' iter ' <<<"$out" | grep -o 'time=[0-9.]*[mµ]*s' | sed 's/time=//' |
		awk '/ms$/{sub("ms","");print $0+0;next} /µs$/{sub("µs","");print $0/1000;next} /s$/{sub("s","");print $0*1000}' |
		sort -n | awk '{v[NR]=$1} END{printf "%.2f", v[int((NR+1)/2)]}')
	sum=$(grep -o 'centroids sha256=[0-9a-f]*' <<<"$out" | cut -c18-33)
	echo "$med $sum"
}

# recovery prints how long rank 0 took from the failure to the restored
# checkpoint (its "restored after" figure) in ms, for the README's job:
# 4 ranks and a spare, rank 2 SIGKILLed after iteration 15.
recovery() { # $1: setting
	local out
	out=$(env $(envOf "$1") "$bin/gaspirun" -n 4 --spares 1 --quiet -- "$bin/kmeans" --generate "$points" --dim 10 --k 100 \
		--max-iter 30 --ckpt-every 5 --inject kill:rank=2,iter=15 2>/dev/null)
	grep -o 'restored after [0-9.]*[mµ]*s' <<<"$out" | head -1 | sed 's/restored after //' |
		awk '/ms$/{sub("ms","");printf "%.1f", $0;next} /µs$/{sub("µs","");printf "%.1f", $0/1000;next} /s$/{sub("s","");printf "%.1f", $0*1000}'
}

terasort() { # $1: setting
	rm -rf "$work/out"
	local t0 t1
	t0=$(date +%s.%N)
	env $(envOf "$1") "$bin/gaspirun" -n 4 --quiet -- "$bin/terasort" sort --in "$work/in" --out "$work/out" >/dev/null 2>&1
	t1=$(date +%s.%N)
	local sum
	sum=$("$bin/terasort" validate "$work/out" 2>&1 | grep -o 'checksum[= ][0-9a-fx]*' | head -1)
	echo "$(awk -v r="$records" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", r*100/(b-a)/1e6}') ${sum// /=}"
}

echo "# K-means (4 ranks, $points points, 10-D, k=100, 20 iterations) and TeraSort (4 ranks,"
echo "# $records records) over TCP (tcp: PGAS_SHM=0), the rings with private segments (ring:"
echo "# PGAS_SHM_SEGMENTS=0) and segments in shared memory (seg: the default), $rounds rounds"
echo "# taking turns; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-4s %14s %-18s %12s %14s %s\n" round via "kmeans-ms/iter" "centroids" "recovery-ms" "terasort-MB/s" "checksum"
settings=(tcp ring seg)
for r in $(seq 1 "$rounds"); do
	for i in 0 1 2; do
		via=${settings[$(((r + i) % 3))]} # each round starts with another setting
		read -r km ksum < <(kmeans "$via")
		rec=$(recovery "$via" || true)
		read -r ts tsum < <(terasort "$via")
		printf "%-6s %-4s %14s %-18s %12s %14s %s\n" "$r" "$via" "$km" "$ksum" "${rec:--}" "$ts" "$tsum"
	done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
