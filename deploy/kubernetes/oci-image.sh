#!/usr/bin/env bash
# oci-image.sh: an OCI image archive of static binaries, without a
# container engine or a base image (none can be pulled where no registry is
# reachable). The archive imports into containerd with
#   ctr -n k8s.io images import ARCHIVE
#
#   deploy/kubernetes/oci-image.sh ARCHIVE REF ENTRYPOINT BINARY...
#
# REF names the image (docker.io/library/gaspigo:dev); ENTRYPOINT is the
# program the image runs, as a JSON array (["/gaspipod","--"]); each
# BINARY is copied to the image's root. The image holds those binaries,
# empty /dev, /proc, /sys, /tmp and /etc (the container runtime mounts
# them), an /etc/passwd naming the unprivileged user 65532 (nonroot), and
# runs as 65532:65532. One uncompressed layer; every file owned by root
# and dated at the epoch, so the same binaries give the same digest.
set -euo pipefail

die() { echo "oci-image.sh: $*" >&2; exit 1; }
[ $# -ge 4 ] || die "usage: $0 ARCHIVE REF ENTRYPOINT BINARY... (e.g. out.tar docker.io/library/gaspigo:dev '[\"/gaspipod\",\"--\"]' bin/gaspipod bin/kmeans)"
archive=$1 ref=$2 entry=$3
shift 3
case $entry in \[*\]) ;; *) die "ENTRYPOINT must be a JSON array, e.g. '[\"/gaspipod\",\"--\"]', not $entry" ;; esac
for b in "$@"; do
	[ -f "$b" ] && [ -x "$b" ] || die "$b is not an executable file"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/dev "$root"/proc "$root"/sys "$root"/tmp "$root"/etc
chmod 1777 "$root"/tmp
printf 'root:x:0:0:root:/:/nonexistent\nnonroot:x:65532:65532:nonroot:/:/nonexistent\n' >"$root"/etc/passwd
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root"/etc/group
for b in "$@"; do
	cp "$b" "$root/$(basename "$b")"
done

blobs=$work/oci/blobs/sha256
mkdir -p "$blobs"
# blob FILE: stores FILE under its digest; prints "sha256:<hex> <size>".
blob() {
	local sum size
	sum=$(sha256sum "$1" | cut -d' ' -f1)
	size=$(stat -c %s "$1")
	mv "$1" "$blobs/$sum"
	echo "sha256:$sum $size"
}

tar -C "$root" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$work/layer.tar" .
read -r layer layersize < <(blob "$work/layer.tar")

cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"User":"65532:65532","Env":["PATH=/"],"Entrypoint":$entry,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["$layer"]}}
JSON
read -r config configsize < <(blob "$work/config.json")

cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$config","size":$configsize},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"$layer","size":$layersize}]}
JSON
read -r manifest manifestsize < <(blob "$work/manifest.json")

cat >"$work/oci/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"$manifest","size":$manifestsize,"annotations":{"io.containerd.image.name":"$ref","org.opencontainers.image.ref.name":"${ref##*:}"}}]}
JSON
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"

tmp=$archive.tmp.$$
tar -C "$work/oci" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$tmp" .
mv "$tmp" "$archive"
echo "oci-image.sh: $archive: $ref ($manifest)"
