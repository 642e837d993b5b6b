#!/usr/bin/env bash
# The scale figures of docs/design.md §14: the simulation table (messages,
# rounds, memory per rank, in fake time) and the wall-clock figures of one
# process holding every rank. Run it with nothing else on the machine; it
# prints the load average before each part.
set -euo pipefail
cd "$(dirname "$0")/../.."
ns=${SCALE_N:-64,256,1024,4096}
wall=${SCALE_WALL:-1024,4096}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
go test -count=1 ./bench/scale -run 'TestScaleTable$' -scale.n="$ns" -timeout 0 -v | grep -v '^=== \|^--- '
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
go test -count=1 ./bench/scale -run 'TestWallClock$' -scale.wall="$wall" -timeout 0 -v | grep -v '^=== \|^--- '
