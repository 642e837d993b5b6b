#!/bin/sh
# build.sh: the static binaries of the container image (deploy/Dockerfile
# runs exactly this), buildable and checkable without a container engine.
#
#   deploy/build.sh OUTDIR                 # every command of the image
#   deploy/build.sh OUTDIR ./cmd/gaspipod  # only these packages
#
# CGO_ENABLED=0 makes every binary static (no libc, no loader), so the image
# needs no base beyond a few files (distroless/static). -trimpath keeps the
# build machine's paths out of the binaries.
set -eu

if [ $# -lt 1 ]; then
	echo "usage: $0 OUTDIR [PACKAGE...]" >&2
	exit 2
fi
out=$1
shift
if [ $# -eq 0 ]; then
	set -- ./cmd/gaspirun ./cmd/gaspipod ./cmd/gaspibench ./apps/kmeans/cmd/kmeans ./apps/terasort/cmd/terasort
fi
cd "$(dirname "$0")/.."
mkdir -p "$out"
# -buildvcs=false: a source tree without git (a container's build context)
# builds all the same; the version is stamped from git when git can say it,
# so that --version names the build, not "devel".
stamp=$(git describe --tags --always --dirty 2>/dev/null || true)
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags="-s -w${stamp:+ -X github.com/gaspigo/gaspigo/internal/buildinfo.stamp=$stamp}" -o "$out/" "$@"
