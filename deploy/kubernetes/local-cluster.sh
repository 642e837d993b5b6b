#!/usr/bin/env bash
# local-cluster.sh: a one-machine Kubernetes cluster for trying and testing
# gaspigo's Indexed Job (deploy/kubernetes) under a real API server,
# scheduler, Job controller and kubelet, from Debian's packages and
# Kubernetes built from the Go module proxy's source. No registry is
# needed: the images are built here from static binaries and imported.
#
#   deploy/kubernetes/local-cluster.sh install  # apt-get install containerd runc etcd-server containernetworking-plugins kubernetes-client nftables openssl
#   deploy/kubernetes/local-cluster.sh build    # build kube-apiserver, -controller-manager, -scheduler, kubelet, kube-proxy into $GASPIGO_K8S_BIN
#   deploy/kubernetes/local-cluster.sh start    # start the cluster (building the binaries first if missing), import the images, wait until the node is Ready
#   deploy/kubernetes/local-cluster.sh images   # rebuild and import the gaspigo and pause images
#   deploy/kubernetes/local-cluster.sh env      # prints "export KUBECONFIG=...": eval it to use the cluster
#   deploy/kubernetes/local-cluster.sh status   # the daemons and the node
#   deploy/kubernetes/local-cluster.sh stop     # stop everything start started, by PID, and undo its changes to the host
#
# Everything lives in one state directory ($GASPIGO_K8S_DIR, default
# /tmp/gaspigo-k8s): certificates, the kubeconfig, etcd's data,
# containerd's root and socket, the kubelet's root, the daemons' PID files
# and logs. Changes outside it, all undone by stop: a bridge
# ($GASPIGO_K8S_BRIDGE, default gaspigo0) and net.ipv4.ip_forward (the
# CNI bridge plugin turns it on; stop restores the value it found), the
# kube-proxy nftables tables, the kubepods cgroups, and what the kubelet
# writes at fixed paths (/var/lib/kubelet/device-plugins, links under
# /var/log/containers). Containerd's shims keep their sockets under
# /run/containerd/s while their containers run.
#
# The binaries ($GASPIGO_K8S_BIN, default /var/cache/gaspigo-k8s/v1.34.0)
# take about 10 minutes to build on 2 cores with a cold cache; build keeps
# them there for the next start. The cluster: etcd on 127.0.0.1:23790, the
# API server on :6443 (token auth, RBAC, the PodSecurity admission), the
# node $GASPIGO_K8S_NODE (default gaspigo-node) on this machine's first
# global IPv4 address, pods in 10.244.0.0/24 on the CNI bridge (hairpin on:
# a pod reaches itself through a Service), Services in 10.96.0.0/16 through
# kube-proxy in nftables mode. There is no cluster DNS (no image to pull
# one from): the Job finds its rendezvous through a Service's cluster IP
# (deploy/kubernetes-local). It needs root.
set -euo pipefail

version=${GASPIGO_K8S_VERSION:-v1.34.0}
bin=${GASPIGO_K8S_BIN:-/var/cache/gaspigo-k8s/$version}
dir=${GASPIGO_K8S_DIR:-/tmp/gaspigo-k8s}
node=${GASPIGO_K8S_NODE:-gaspigo-node}
bridge=${GASPIGO_K8S_BRIDGE:-gaspigo0}
repo=$(cd "$(dirname "$0")/../.." && pwd)
pause_ref=registry.k8s.io/pause:3.10.1
image_ref=docker.io/library/gaspigo:dev
daemons="containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
kube_bins="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"

die() { echo "local-cluster.sh: $*" >&2; exit 1; }
say() { echo "local-cluster.sh: $*"; }

need_root() { [ "$(id -u)" = 0 ] || die "needs root (the kubelet and containerd manage cgroups, mounts and network namespaces)"; }

need_packages() {
	local missing=()
	for b in containerd ctr runc etcd kubectl nft openssl; do
		command -v "$b" >/dev/null 2>&1 || missing+=("$b")
	done
	[ -x /usr/lib/cni/bridge ] || missing+=("/usr/lib/cni/bridge")
	[ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: run '$0 install'"
}

# need_binaries builds the Kubernetes binaries when some are missing
# (cmd_build: the first start takes 7-10 minutes more on 2 cores).
need_binaries() {
	local c
	for c in $kube_bins; do
		if [ ! -x "$bin/$c" ]; then
			say "no $bin/$c: building the Kubernetes binaries first (GASPIGO_K8S_BIN names a folder that has them)"
			cmd_build
			return
		fi
	done
}

cmd_install() {
	need_root
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q containerd runc etcd-server containernetworking-plugins kubernetes-client nftables openssl
	# Debian starts the packaged daemons; this cluster runs its own.
	for s in containerd etcd; do
		if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q "$s" 2>/dev/null; then systemctl stop "$s" || true; fi
		if command -v service >/dev/null 2>&1; then service "$s" stop >/dev/null 2>&1 || true; fi
	done
}

# cmd_build builds the Kubernetes binaries from the module proxy's source:
# the module's go.mod points its k8s.io/* modules at ./staging, which the
# proxy's copy lacks, so they are pinned to the published v0.x.y instead.
cmd_build() {
	command -v go >/dev/null 2>&1 || die "no go on PATH"
	local c missing=()
	for c in $kube_bins; do [ -x "$bin/$c" ] || missing+=("./cmd/$c"); done
	if [ ${#missing[@]} -eq 0 ]; then say "binaries are in $bin"; return; fi
	local mod src staging=${version/v1./v0.}
	mod=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$mod" ] || die "the module proxy did not give k8s.io/kubernetes@$version"
	src=$dir/src/kubernetes-$version
	rm -rf "$src"
	mkdir -p "$dir/src"
	cp -r "$mod" "$src"
	chmod -R u+w "$src"
	rm -rf "$src/vendor" "$src"/go.work*
	sed -i -e '/=> \.\/staging/d' -e "s#^\([[:space:]]*k8s\.io/[a-z0-9-]*\) v0\.0\.0\$#\1 $staging#" "$src/go.mod"
	mkdir -p "$bin"
	local major=${version#v} minor
	minor=${major#*.}
	minor=${minor%%.*}
	major=${major%%.*}
	say "building ${missing[*]} $version into $bin (about 10 minutes on 2 cores with a cold cache)"
	(cd "$src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$bin/" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor" \
		"${missing[@]}")
	rm -rf "$src"
	say "built into $bin"
}

node_ip() {
	ip -4 -o addr show scope global | awk '{split($4, a, "/"); print a[1]; exit}'
}

# cmd_images builds the gaspigo image (deploy/build.sh's binaries) and the
# pause image, and imports both into containerd's k8s.io namespace.
cmd_images() {
	local out=$dir/images
	mkdir -p "$out/bin"
	"$repo/deploy/build.sh" "$out/bin"
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/pause" ./cmd/gaspipause)
	"$repo/deploy/kubernetes/oci-image.sh" "$out/gaspigo.tar" "$image_ref" '["/gaspipod","--"]' "$out"/bin/*
	"$repo/deploy/kubernetes/oci-image.sh" "$out/pause.tar" "$pause_ref" '["/pause"]' "$out/pause"
	ctr -a "$dir/containerd/containerd.sock" -n k8s.io images import "$out/pause.tar" >/dev/null
	ctr -a "$dir/containerd/containerd.sock" -n k8s.io images import "$out/gaspigo.tar" >/dev/null
	say "imported $image_ref and $pause_ref"
}

certs() {
	local c=$dir/pki ip=$1
	mkdir -p "$c"
	chmod 0700 "$c"
	[ -s "$c/tokens.csv" ] && return
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$c/ca.key" -out "$c/ca.crt" -days 30 -subj /CN=gaspigo-local-ca 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout "$c/apiserver.key" -out "$c/apiserver.csr" -subj /CN=kube-apiserver 2>/dev/null
	echo "subjectAltName=IP:127.0.0.1,IP:$ip,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" >"$c/san.ext"
	openssl x509 -req -in "$c/apiserver.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial -out "$c/apiserver.crt" -days 30 -extfile "$c/san.ext" 2>/dev/null
	openssl genrsa -out "$c/sa.key" 2048 2>/dev/null
	openssl rsa -in "$c/sa.key" -pubout -out "$c/sa.pub" 2>/dev/null
	echo "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n'),admin,admin,system:masters" >"$c/tokens.csv"
}

kubeconfig() {
	local token
	token=$(cut -d, -f1 "$dir/pki/tokens.csv")
	cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $dir/pki/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: local
  context:
    cluster: local
    user: admin
current-context: local
EOF
	chmod 0600 "$dir/kubeconfig"
}

containerd_config() {
	local d=$dir/containerd
	mkdir -p "$d/root" "$d/state"
	containerd config default >"$d/config.toml.default"
	sed -e "s#^root = .*#root = \"$d/root\"#" \
		-e "s#^state = .*#state = \"$d/state\"#" \
		-e "0,/^  address = \"\/run\/containerd\/containerd.sock\"/s##  address = \"$d/containerd.sock\"#" \
		-e "s#sandbox_image = .*#sandbox_image = \"$pause_ref\"#" \
		-e "s#restrict_oom_score_adj = false#restrict_oom_score_adj = true#" \
		-e "s#bin_dir = \"/opt/cni/bin\"#bin_dir = \"/usr/lib/cni\"#" \
		-e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$dir/cni/net.d\"#" \
		"$d/config.toml.default" >"$d/config.toml"
	grep -q "restrict_oom_score_adj = true" "$d/config.toml" || die "could not set restrict_oom_score_adj in containerd's config (see $d/config.toml)"
	grep -q "address = \"$d/containerd.sock\"" "$d/config.toml" || die "could not set containerd's socket (see $d/config.toml)"
	mkdir -p "$dir/cni/net.d" "$dir/cni/data"
	cat >"$dir/cni/net.d/10-gaspigo.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "gaspigo",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "dataDir": "$dir/cni/data"}},
    {"type": "loopback"}
  ]
}
EOF
}

kubelet_config() {
	local k=$dir/kubelet ip=$1
	mkdir -p "$k/root" "$k/pki" "$k/logs" "$k/volume-plugins"
	cat >"$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: $ip
readOnlyPort: 0
podLogsDir: $k/logs
volumePluginDir: $k/volume-plugins
makeIPTablesUtilChains: false
oomScoreAdj: 0
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

# run NAME CMD...: starts a daemon in its own session, its output in
# log/NAME.log and its PID in pid/NAME.
run() {
	local name=$1
	shift
	mkdir -p "$dir/log" "$dir/pid"
	setsid "$@" >"$dir/log/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/pid/$name"
}

alive() { [ -s "$dir/pid/$1" ] && kill -0 "$(cat "$dir/pid/$1")" 2>/dev/null; }

# wait_for WHAT SECONDS CMD...: retries CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 4; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	die "$what did not come up within ${secs}s (logs in $dir/log)"
}

kc() { kubectl --kubeconfig "$dir/kubeconfig" "$@"; }

cmd_start() {
	need_root
	need_packages
	need_binaries
	local d ip
	for d in $daemons; do
		alive "$d" && die "$d already runs (pid $(cat "$dir/pid/$d")): '$0 stop' first"
	done
	ip=$(node_ip)
	[ -n "$ip" ] || die "no global IPv4 address on this machine: the kubelet's node IP cannot be loopback"
	mkdir -p "$dir"
	chmod 0700 "$dir"
	[ -s "$dir/ip_forward.saved" ] || cat /proc/sys/net/ipv4/ip_forward >"$dir/ip_forward.saved"
	[ -e /var/lib/kubelet/device-plugins ] || echo created >"$dir/device-plugins.created"
	[ -e /var/log/containers ] || echo created >"$dir/log-containers.created"
	[ -e /run/containerd ] || echo created >"$dir/run-containerd.created"
	certs "$ip"
	kubeconfig
	containerd_config
	kubelet_config "$ip"
	run containerd containerd --config "$dir/containerd/config.toml"
	run etcd etcd --name gaspigo --data-dir "$dir/etcd" \
		--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
		--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
		--initial-cluster gaspigo=http://127.0.0.1:23800
	run kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 \
		--bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$ip" \
		--service-cluster-ip-range=10.96.0.0/16 \
		--tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
		--client-ca-file="$dir/pki/ca.crt" --token-auth-file="$dir/pki/tokens.csv" --authorization-mode=RBAC \
		--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$dir/pki/sa.pub" \
		--service-account-signing-key-file="$dir/pki/sa.key" --kubelet-preferred-address-types=InternalIP
	wait_for "containerd" 30 ctr -a "$dir/containerd/containerd.sock" version
	wait_for "the API server" 90 kc get --raw /readyz
	run kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$dir/kubeconfig" \
		--service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" \
		--leader-elect=false --use-service-account-credentials=false --bind-address=127.0.0.1
	run kube-scheduler "$bin/kube-scheduler" --kubeconfig="$dir/kubeconfig" --leader-elect=false --bind-address=127.0.0.1
	cmd_images
	run kubelet "$bin/kubelet" --config="$dir/kubelet/config.yaml" --kubeconfig="$dir/kubeconfig" \
		--root-dir="$dir/kubelet/root" --cert-dir="$dir/kubelet/pki" --hostname-override="$node" --node-ip="$ip"
	run kube-proxy "$bin/kube-proxy" --kubeconfig="$dir/kubeconfig" --proxy-mode=nftables \
		--cluster-cidr=10.244.0.0/24 --conntrack-max-per-core=0 --hostname-override="$node" \
		--metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
	wait_for "node $node" 120 kc wait --for=condition=Ready "node/$node" --timeout=1s
	wait_for "the default service account" 60 kc get serviceaccount default
	say "up: node $node ($ip) Ready; eval \"\$($0 env)\" to use it"
}

# stop_daemon NAME: SIGTERM, then SIGKILL after 10 s.
stop_daemon() {
	local name=$1 pid i
	[ -s "$dir/pid/$name" ] || return 0
	pid=$(cat "$dir/pid/$name")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 40; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/pid/$name"
}

cmd_stop() {
	need_root
	local sock=$dir/containerd/containerd.sock t
	stop_daemon kube-proxy
	[ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup --proxy-mode=nftables >/dev/null 2>&1 || true
	stop_daemon kube-scheduler
	stop_daemon kube-controller-manager
	stop_daemon kubelet
	# The pods' containers: their shims outlive the kubelet.
	if alive containerd; then
		for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
		for ((t = 0; t < 40; t++)); do
			[ -z "$(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null | head -1)" ] && break
			sleep 0.25
		done
		for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true
		done
		for t in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io containers delete "$t" >/dev/null 2>&1 || true
		done
	fi
	stop_daemon kube-apiserver
	stop_daemon etcd
	stop_daemon containerd
	# What the daemons leave on the host.
	grep -o " $dir/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	ip link del "$bridge" 2>/dev/null || true
	[ -s "$dir/ip_forward.saved" ] && cat "$dir/ip_forward.saved" >/proc/sys/net/ipv4/ip_forward && rm -f "$dir/ip_forward.saved"
	local cg
	for cg in /sys/fs/cgroup/kubepods* /sys/fs/cgroup/*/kubepods*; do
		[ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	if [ -e "$dir/device-plugins.created" ]; then
		rm -rf /var/lib/kubelet/device-plugins
		rmdir /var/lib/kubelet 2>/dev/null || true
		rm -f "$dir/device-plugins.created"
	fi
	if [ -d /var/log/containers ]; then
		find /var/log/containers -lname "$dir/*" -delete 2>/dev/null || true
		[ -e "$dir/log-containers.created" ] && rmdir /var/log/containers 2>/dev/null
	fi
	rm -f "$dir/log-containers.created"
	# The shims' fixed runtime directory, once they are gone.
	if [ -e "$dir/run-containerd.created" ]; then
		find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
		rm -f "$dir/run-containerd.created"
	fi
	say "stopped"
}

cmd_status() {
	local d
	for d in $daemons; do
		if alive "$d"; then echo "$d: running (pid $(cat "$dir/pid/$d"))"; else echo "$d: not running"; fi
	done
	alive kube-apiserver && kc get nodes -o wide 2>&1 || true
}

case ${1:-} in
install) cmd_install ;;
build) cmd_build ;;
start) cmd_start ;;
images) need_root; cmd_images ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export KUBECONFIG=$dir/kubeconfig" ;;
*) die "usage: $0 install|build|start|images|env|status|stop" ;;
esac
