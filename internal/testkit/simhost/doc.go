// Package simhost builds simulated hosts on one Linux machine for
// multi-host tests: each host is a network namespace with its own address,
// joined to the others by a veth pair to a bridge in the root namespace,
// which has an address on the bridge too, so that a front end there
// (gaspirun, an ssh client) reaches every host.
//
//	simhost.Require(t) // skips without root or iproute2
//	c, err := simhost.New(ctx, simhost.Config{Hosts: 3})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { c.Close() })
//	cmd := c.Host(1).Command(ctx, "/path/prog", "--flag") // runs on node2
//	c.Cut(c.Host(1), simhost.Silent)  // node2 drops off the network
//	c.Heal(c.Host(1))
//	c.Crash(c.Host(2))                // SIGKILL everything on node3
//
// # Names and addresses
//
// Hosts are node1..nodeN (Host(0) is node1) with addresses .1 to .N of a
// /24; the root namespace has .254, named FrontName ("front") on the
// hosts. Unless Config.Subnet is set, New picks the /24 in 10.200.0.0 to
// 10.249.255.0 that overlaps nothing in the root namespace, so concurrent
// users (other test binaries, other checkouts) do not collide; it starts
// probing at a slot derived from the process id, and backs off if another
// process took the same slot at the same moment.
//
// Every kernel object is named after the cluster id, "gh" + the pid in
// base 36 + "-" + a per-process sequence number: the namespaces ID-node1,
// ..., the bridge ID-b, the veths ID-v0, .... `ip netns list` and `ip
// link` show them.
//
// # Name resolution
//
// Each host has its own /etc/hosts, written to /etc/netns/NS/hosts, which
// `ip netns exec` (and so Host.Command) bind-mounts over /etc/hosts: every
// other host resolves by name, and the host's own name resolves to
// 127.0.1.1 as on Debian, unless Config.SelfAddr. This reproduces on
// purpose the trap of a program that finds its address from its own host
// name. The namespaces share the machine's host name (uts namespace): give
// programs their host name in their environment (e.g. PGAS_HOST=node2).
//
// # Faults
//
// Cut(h, Silent) detaches h's veth from the bridge: like a real partition,
// nothing is told and traffic vanishes. Cut(h, Unreachable) sets h's own
// interface down: h's processes get "network is unreachable" at once, the
// others see silence. Heal reconnects. Crash SIGKILLs every process in the
// host's namespace, found by namespace in /proc (Host.PIDs), so it also
// gets processes started by others (an sshd's children). Whether a cut
// host's processes notice, and when, is the program's business; note
// that the root namespace is cut off from h as well.
//
// # Cleanup
//
// Close kills every process in the namespaces and removes everything: it
// is idempotent and belongs in t.Cleanup, so it runs when a test fails.
// A cluster's owner holds an flock on /run/gaspigo-simhost/ID.lock while
// the cluster lives; Sweep (which New calls) removes the objects of every
// cluster whose lock nobody holds, i.e. whose owner died without Close,
// and never touches a live cluster's.
//
// Methods of Cluster are safe for concurrent use. Host.Dir is a per-host
// directory for what a real host keeps on its local disk.
package simhost
