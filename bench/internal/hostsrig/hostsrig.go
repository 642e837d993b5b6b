// Package hostsrig is the simulated cluster the across-hosts benchmarks
// launch into (bench/mpi -hosts, bench/apphosts): network namespaces on a
// bridge (internal/testkit/simhost), each a host with its own address, a
// launch agent and a hostfile. The agent is a script that runs the remote
// command in the host's network namespace (ip netns exec), with a host
// name of its own (unshare --uts: Open MPI's shared-memory files carry
// it, and hosts that share one collide), instead of over ssh: mpirun's
// plm_rsh_agent and gaspirun's --ssh take the same form (host, then the
// command). The hostfile lists each host's address with -per-host slots,
// so ranks fill the hosts in order.
package hostsrig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// Rig is the simulated cluster and the files both launchers use.
type Rig struct {
	C        *simhost.Cluster
	Agent    string // the launch agent script
	Hostfile string // "ADDR slots=P" per host
}

// New builds n simulated hosts of perHost slots, the agent and the
// hostfile in dir. It needs root and iproute2 (simhost.Unavailable).
func New(dir string, n, perHost int) (*Rig, error) {
	if reason := simhost.Unavailable(); reason != "" {
		return nil, fmt.Errorf("simulated hosts: %s", reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := simhost.New(ctx, simhost.Config{Hosts: n, SelfAddr: true})
	if err != nil {
		return nil, err
	}
	r := &Rig{C: c, Agent: filepath.Join(dir, "netns-agent"), Hostfile: filepath.Join(dir, "hosts")}
	var script, hosts strings.Builder
	script.WriteString("#!/bin/sh\n# A launch agent: the host, then the command, run in that host's network namespace.\nhost=$1; shift\ncase \"$host\" in\n")
	for _, h := range c.Hosts() {
		fmt.Fprintf(&script, "%s|%s) ns=%s name=%s ;;\n", h.Addr(), h.Name(), h.Namespace(), h.Name())
		fmt.Fprintf(&hosts, "%s slots=%d\n", h.Addr(), perHost)
	}
	script.WriteString("*) echo \"netns-agent: unknown host $host\" >&2; exit 255 ;;\nesac\n# A host name of its own (a UTS namespace): Open MPI names its shared-memory files after it.\nexec ip netns exec \"$ns\" unshare --uts /bin/sh -c 'hostname \"$0\" && exec /bin/sh -c \"$1\"' \"$name\" \"$*\"\n")
	if err := os.WriteFile(r.Agent, []byte(script.String()), 0o755); err != nil {
		c.Close()
		return nil, err
	}
	if err := os.WriteFile(r.Hostfile, []byte(hosts.String()), 0o644); err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// Close removes the simulated hosts.
func (r *Rig) Close() error { return r.C.Close() }
