package simhost

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// CutMode says how Cut takes a host off the network.
type CutMode int

const (
	// Silent detaches the root side of the host's veth pair from the
	// bridge (`ip link set VETH nomaster`). Frames to and from the host
	// vanish, and nothing on either side is told: open connections stall
	// until their own timeouts, new connects time out or end in "no route
	// to host" once ARP gives up. This is what a real partition looks like
	// (a dead switch port, a pulled cable between switches), so it is the
	// one to test fault tolerance with.
	Silent CutMode = iota + 1
	// Unreachable sets the host's own interface down (`ip -n NS link set
	// eth0 down`). The host's processes learn at once: their new connects
	// fail with "network is unreachable"; the other hosts see silence, as
	// with Silent. It stands for a host whose own NIC or link failed.
	Unreachable
)

func (m CutMode) String() string {
	switch m {
	case Silent:
		return "silent"
	case Unreachable:
		return "unreachable"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// Cluster is a set of simulated hosts: one network namespace per host, a
// veth pair from each to a bridge in the root namespace, which has an
// address on the bridge too. Its methods are safe for concurrent use.
type Cluster struct {
	id     string
	subnet netip.Prefix
	hosts  []*Host
	dir    string   // parent of the hosts' directories
	lock   *os.File // held while the cluster exists; see Sweep

	mu     sync.Mutex // guards closed and every Host.cut
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// Host is one simulated host.
type Host struct {
	c     *Cluster
	index int
	name  string
	ns    string
	addr  netip.Addr
	dir   string
	cut   CutMode // 0: connected; guarded by c.mu
}

// seq numbers the clusters of this process.
var seq atomic.Int64

// ipCmd is the iproute2 binary.
const ipCmd = "ip"

// New builds a cluster as cfg says: it first sweeps away what crashed
// earlier runs left (see Sweep), then creates the bridge, the namespaces,
// the veth pairs, the addresses and each host's /etc/hosts. On error
// everything created so far is removed. The caller must Close the
// cluster (also when its test fails: t.Cleanup(func() { c.Close() })).
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reason := Unavailable(); reason != "" {
		return nil, errors.New("simhost: " + reason)
	}
	id := clusterID(os.Getpid(), int(seq.Add(1)-1))
	if err := checkNames(id, cfg.Hosts); err != nil {
		return nil, err
	}
	_ = Sweep(ctx) // best effort: a leftover that stays only costs a subnet slot
	c := &Cluster{id: id}
	if err := c.build(ctx, cfg); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func (c *Cluster) build(ctx context.Context, cfg Config) error {
	lock, err := takeLock(c.id)
	if err != nil {
		return err
	}
	c.lock = lock
	c.dir = filepath.Join(os.TempDir(), c.id)
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	if err := c.bridge(ctx, cfg.Subnet); err != nil {
		return err
	}
	for i := range cfg.Hosts {
		h := &Host{c: c, index: i, name: hostName(i), ns: nsName(c.id, i), addr: hostAddr(c.subnet, i),
			dir: filepath.Join(c.dir, hostName(i))}
		c.hosts = append(c.hosts, h)
		if err := c.addHost(ctx, h, cfg); err != nil {
			return err
		}
	}
	return nil
}

// bridge creates the bridge with the root namespace's address on a free
// (or the given) subnet. Two processes that chose the same slot at once
// both see the clash after adding their address, and each moves on.
func (c *Cluster) bridge(ctx context.Context, subnet netip.Prefix) error {
	br := bridgeName(c.id)
	if err := run(ctx, "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	if err := run(ctx, "link", "set", br, "up"); err != nil {
		return err
	}
	var taken []netip.Prefix
	for attempt := 0; ; attempt++ {
		p := subnet
		if !p.IsValid() {
			t, err := rootTaken(ctx)
			if err != nil {
				return err
			}
			if p, err = ChooseSubnet(append(taken, t...), startSlot(os.Getpid(), attempt*7919+int(seq.Load()))); err != nil {
				return err
			}
		}
		front := netip.PrefixFrom(frontAddr(p), 24).String()
		if err := run(ctx, "addr", "add", front, "dev", br); err != nil {
			return err
		}
		clash, err := clashes(ctx, p, br)
		if err != nil {
			return err
		}
		if !clash {
			c.subnet = p
			return nil
		}
		if subnet.IsValid() || attempt == 8 {
			return fmt.Errorf("%w: %v is in use by another interface", ErrNoSubnet, p)
		}
		if err := run(ctx, "addr", "del", front, "dev", br); err != nil {
			return err
		}
		taken = append(taken, p)
	}
}

// rootTaken lists the prefixes of the root namespace's addresses and
// routes.
func rootTaken(ctx context.Context) ([]netip.Prefix, error) {
	addrs, err := output(ctx, "-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	routes, err := output(ctx, "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	return parseTaken(addrs, routes), nil
}

// clashes reports whether an interface other than br has an address in p.
func clashes(ctx context.Context, p netip.Prefix, br string) (bool, error) {
	out, err := output(ctx, "-4", "-o", "addr", "show")
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "inet" || f[1] == br {
			continue
		}
		if q, err := netip.ParsePrefix(f[3]); err == nil && q.Overlaps(p) {
			return true, nil
		}
	}
	return false, nil
}

// addHost creates host h: its namespace, its veth pair (the namespace end
// renamed eth0), its address, its /etc/hosts and its directory.
func (c *Cluster) addHost(ctx context.Context, h *Host, cfg Config) error {
	veth, peer := vethName(c.id, h.index), peerName(c.id, h.index)
	etc := filepath.Join("/etc/netns", h.ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	hosts := HostsFile(c.subnet, cfg.Hosts, h.index, cfg.SelfAddr)
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return err
	}
	steps := [][]string{
		{"netns", "add", h.ns},
		{"link", "add", veth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.ns},
		{"link", "set", veth, "master", bridgeName(c.id)},
		{"link", "set", veth, "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.ns, "link", "set", peer, "name", "eth0"},
		{"-n", h.ns, "addr", "add", netip.PrefixFrom(h.addr, 24).String(), "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// ID is the stem of every name the cluster gave its kernel objects.
func (c *Cluster) ID() string { return c.id }

// Subnet is the cluster's /24.
func (c *Cluster) Subnet() netip.Prefix { return c.subnet }

// FrontAddr is the root namespace's address on the bridge (.254): a
// program in the root namespace that listens there (or on 0.0.0.0) is
// reachable from every host, which resolves it as FrontName.
func (c *Cluster) FrontAddr() netip.Addr { return frontAddr(c.subnet) }

// Hosts returns the hosts in order: node1 first.
func (c *Cluster) Hosts() []*Host { return append([]*Host(nil), c.hosts...) }

// Host returns host i, 0-based: Host(0) is node1.
func (c *Cluster) Host(i int) *Host { return c.hosts[i] }

// Name is the host's name, node1..nodeN, which every other host resolves
// to Addr.
func (h *Host) Name() string { return h.name }

// Index is the host's 0-based position in the cluster.
func (h *Host) Index() int { return h.index }

// Addr is the host's address on the bridge.
func (h *Host) Addr() netip.Addr { return h.addr }

// Namespace is the name of the host's network namespace (for `ip netns
// exec`).
func (h *Host) Namespace() string { return h.ns }

// Dir is a directory of the host's own, created by New and removed by
// Close, for what a real host keeps on its local disk (spill files, state
// directories). Other hosts' processes can still read it: keeping out is
// up to the program under test.
func (h *Host) Dir() string { return h.dir }

// Command returns a command that runs name with args inside the host's
// namespace, through `ip netns exec`, which also bind-mounts the host's
// /etc/hosts over /etc/hosts. ip execs the program, so the command's
// process is the program itself.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, ipCmd, append([]string{"netns", "exec", h.ns, name}, args...)...)
}

// PIDs lists the processes running in the host's namespace.
func (h *Host) PIDs() ([]int, error) { return nsPIDs(h.ns) }

// check returns an error unless h is a live host of c; c.mu is held.
func (c *Cluster) check(h *Host) error {
	if c.closed {
		return ErrClosed
	}
	if h == nil || h.c != c {
		return ErrUnknownHost
	}
	return nil
}

// Cut takes h off the network as mode says (see CutMode). Cutting a cut
// host again with the same mode does nothing; with the other mode, it is
// healed first.
func (c *Cluster) Cut(h *Host, mode CutMode) error {
	if mode != Silent && mode != Unreachable {
		return fmt.Errorf("simhost: Cut: unknown mode %v: use Silent or Unreachable", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(h); err != nil {
		return err
	}
	if h.cut == mode {
		return nil
	}
	if err := c.heal(h); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var err error
	if mode == Silent {
		err = run(ctx, "link", "set", vethName(c.id, h.index), "nomaster")
	} else {
		err = run(ctx, "-n", h.ns, "link", "set", "eth0", "down")
	}
	if err == nil {
		h.cut = mode
	}
	return err
}

// Heal undoes Cut; a connected host is left alone.
func (c *Cluster) Heal(h *Host) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(h); err != nil {
		return err
	}
	return c.heal(h)
}

// heal reconnects h; c.mu is held.
func (c *Cluster) heal(h *Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var err error
	switch h.cut {
	case Silent:
		err = run(ctx, "link", "set", vethName(c.id, h.index), "master", bridgeName(c.id))
	case Unreachable:
		err = run(ctx, "-n", h.ns, "link", "set", "eth0", "up")
	}
	if err == nil {
		h.cut = 0
	}
	return err
}

// IsCut reports how h is cut off, or 0 when it is connected.
func (c *Cluster) IsCut(h *Host) CutMode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return h.cut
}

// Crash SIGKILLs every process in h's namespace (whoever started it) and
// returns their pids. It repeats the sweep until it finds none, so a
// process forked meanwhile dies too. The host stays up: processes started
// on it afterwards run normally.
func (c *Cluster) Crash(h *Host) ([]int, error) {
	c.mu.Lock()
	err := c.check(h)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return killAll(h.ns)
}

// cmdTimeout bounds every ip command run without a caller's context.
const cmdTimeout = 30 * time.Second

// Close kills every process in the hosts' namespaces and removes the
// namespaces, the veth pairs, the bridge, the hosts files and
// directories, and the cluster's lock file. It is idempotent and safe to
// call on a half-built cluster; later calls return the first call's
// result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.closeErr = removeID(c.id)
		if c.lock != nil {
			os.Remove(c.lock.Name())
			c.lock.Close()
		}
	})
	return c.closeErr
}

// killAll SIGKILLs every process in namespace ns until none is left (at
// most a few rounds) and returns the pids it signalled, each once.
func killAll(ns string) ([]int, error) {
	var killed []int
	seen := map[int]bool{}
	for round := 0; round < 50; round++ {
		pids, err := nsPIDs(ns)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return killed, nil
			}
			return killed, err
		}
		if len(pids) == 0 {
			return killed, nil
		}
		for _, p := range pids {
			if syscall.Kill(p, syscall.SIGKILL) == nil && !seen[p] {
				seen[p] = true
				killed = append(killed, p)
			}
		}
		time.Sleep(10 * time.Millisecond) // real processes: let the kills land
	}
	return killed, fmt.Errorf("simhost: processes still running in namespace %s after repeated SIGKILLs", ns)
}

// nsPIDs lists the processes whose network namespace is the named one.
// A zombie has no namespace any more and is not listed.
func nsPIDs(ns string) ([]int, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, ns), &want); err != nil {
		return nil, &os.PathError{Op: "stat", Path: filepath.Join(netnsDir, ns), Err: err}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid := 0
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid <= 0 || fmt.Sprint(pid) != e.Name() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue
		}
		if st.Ino == want.Ino && st.Dev == want.Dev {
			out = append(out, pid)
		}
	}
	return out, nil
}

// netnsDir is where `ip netns add` mounts the namespaces.
const netnsDir = "/run/netns"

// run runs ip with args.
func run(ctx context.Context, args ...string) error {
	_, err := output(ctx, args...)
	return err
}

// output runs ip with args and returns its standard output.
func output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, ipCmd, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &CmdError{Args: append([]string{ipCmd}, args...), Output: strings.TrimSpace(stderr.String()), Err: err}
	}
	return string(out), nil
}
