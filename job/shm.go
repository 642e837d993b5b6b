package job

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/route"
	"github.com/gaspigo/gaspigo/transport/shm"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// Variables of the same-host data plane.
const (
	// VarShm turns the shared-memory transport off (0) or on (1, the
	// default): processes with the same host label (PGAS_HOST) send to
	// each other through rings in shared memory instead of TCP.
	VarShm = "PGAS_SHM"
	// VarShmSpin is how long a shared-memory receiver (or a sender facing
	// a full ring) polls before it sleeps, as a Go duration, e.g. "20us";
	// "0" sleeps at once. Unset: 20us when this machine runs no more of
	// the job's processes than it has CPUs, whatever their host labels
	// (machine.go), else 0 (a polling process would take the CPU that
	// another one needs).
	VarShmSpin = "PGAS_SHM_SPIN"
	// VarShmSegments puts segments in shared memory (1, the default)
	// that the processes of one host map, so that a one-sided write to a
	// rank of this host is a copy plus a doorbell frame
	// (pgas.Config.DirectShm); 0 keeps them private, and writes go
	// through the rings. It needs the shared-memory transport (PGAS_SHM).
	VarShmSegments = "PGAS_SHM_SEGMENTS"
	// shmExtra is the member table's endpoint name for the address of a
	// process's shared-memory transport.
	shmExtra = "shm"
)

// shmConfig reads PGAS_SHM and PGAS_SHM_SPIN. on is false when shared
// memory is turned off; spin is negative when PGAS_SHM_SPIN is unset.
func shmConfig(lookup func(string) (string, bool)) (on bool, spin time.Duration, err error) {
	on, spin = true, -1
	if v, ok := lookup(VarShm); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "1", "on", "true", "yes":
		case "0", "off", "false", "no":
			on = false
		default:
			return false, 0, &bootstrap.EnvError{Var: VarShm, Value: v, Problem: "is not 0 or 1",
				Fix: "set PGAS_SHM=0 to send every frame over TCP, or leave it unset (or 1) to use shared memory between processes of one host"}
		}
	}
	if v, ok := lookup(VarShmSpin); ok && strings.TrimSpace(v) != "" {
		d, perr := time.ParseDuration(strings.TrimSpace(v))
		if strings.TrimSpace(v) == "0" {
			d, perr = 0, nil
		}
		if perr != nil || d < 0 || d > time.Second {
			return false, 0, &bootstrap.EnvError{Var: VarShmSpin, Value: v, Problem: "is not a duration between 0 and 1s",
				Fix: "give a Go duration such as 20us, or 0 to sleep at once"}
		}
		spin = d
	}
	return on, spin, nil
}

// shmSegments reads PGAS_SHM_SEGMENTS (unset: on).
func shmSegments(lookup func(string) (string, bool)) (bool, error) {
	v, ok := lookup(VarShmSegments)
	if !ok {
		return true, nil
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "off", "false", "no":
		return false, nil
	case "", "1", "on", "true", "yes":
		return true, nil
	}
	return false, &bootstrap.EnvError{Var: VarShmSegments, Value: v, Problem: "is not 0 or 1",
		Fix: "set PGAS_SHM_SEGMENTS=0 to keep segment memory private to each process (writes go through the rings), or leave it unset (or 1) to share it between processes of one host"}
}

// dataPlane is the data-plane transport as Init builds it: TCP to every
// process, and shared memory (transport/shm) to the processes of this
// host unless PGAS_SHM=0, joined by a router (transport/route).
type dataPlane struct {
	tcp         *tcp.Transport
	shm         *shm.Transport // nil when shared memory is off
	autoSpin    bool           // PGAS_SHM_SPIN is unset
	autoTCPSpin bool           // PGAS_TCP_SPIN is unset and Options.TCP left PollSpin alone
	segments    bool           // PGAS_SHM_SEGMENTS (on unless 0)

	// The transports' handshake bounds before the job's stretch (connect).
	tcpHandshake, shmHandshake time.Duration
}

// newDataPlane binds the TCP listener (newTransport) and, when shared
// memory is on, the shared-memory transport's socket.
func newDataPlane(env bootstrap.Env, inj *netfault.Injector, log *slog.Logger, adjust func(*tcp.Config)) (*dataPlane, error) {
	on, spin, err := shmConfig(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	segs, err := shmSegments(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	idle, err := tcpIdle(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	spinTCP, autoTCP, err := tcpSpin(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	tr, err := newTransport(env, inj, log, func(c *tcp.Config) {
		c.IdleTimeout = idle
		autoTCP = adjustTCP(c, adjust, spinTCP, autoTCP)
	})
	if err != nil {
		return nil, err
	}
	d := &dataPlane{tcp: tr, segments: segs, tcpHandshake: tr.HandshakeTimeout(), autoTCPSpin: autoTCP}
	if !on {
		return d, nil
	}
	sc := shm.DefaultConfig()
	sc.Self, sc.Token = transport.Proc(env.Proc), env.Token
	if spin >= 0 {
		sc.Spin = spin
	}
	d.autoSpin = spin < 0
	d.shmHandshake = sc.HandshakeTimeout
	sc.Logger = log.With("proc", int(env.Proc), "layer", "shm")
	if inj != nil {
		sc.Faults = inj // the chaos suite's network faults apply to the rings too
	}
	d.shm, err = shm.New(sc)
	if errors.Is(err, shm.ErrUnsupported) {
		return d, nil
	}
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: shared-memory transport (set %s=0 to do without): %w", VarShm, err)
	}
	return d, nil
}

// addExtra adds the shared-memory address to a member's endpoints.
func (d *dataPlane) addExtra(extra map[string]string) map[string]string {
	if d.shm == nil {
		return extra
	}
	out := map[string]string{shmExtra: d.shm.Addr()}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// connect gives the transports their peers from the member table and
// returns the transport for the runtime: the router when shared memory is
// on, TCP alone otherwise. Same-host peers are the members with this
// process's host label that published a shared-memory address.
func (d *dataPlane) connect(self uint32, host string, table bootstrap.Table) (transport.Transport, error) {
	peers := make(map[transport.Proc]string, len(table.Members))
	near := map[transport.Proc]string{}
	for _, m := range table.Members {
		if m.Proc == self {
			continue
		}
		peers[transport.Proc(m.Proc)] = m.Addr
		if a := m.Extra[shmExtra]; a != "" && m.Host == host {
			near[transport.Proc(m.Proc)] = a
		}
	}
	if err := d.tcp.SetPeers(peers); err != nil {
		return nil, err
	}
	onMachine := machineMembers(table, host, thisMachine())
	if d.autoTCPSpin {
		d.tcp.SetPollSpin(autoTCPSpin(onMachine, runtime.NumCPU()))
	}
	f, _ := stretch(table)
	if f > 1 {
		// A starved peer proves itself late, not never: a handshake that
		// timed out would be taken for a refusal, and the peer for dead.
		d.tcp.SetHandshakeTimeout(time.Duration(f) * d.tcpHandshake)
	}
	if d.shm == nil {
		return d.tcp, nil
	}
	if err := d.shm.SetPeers(near); err != nil {
		return nil, err
	}
	if d.autoSpin {
		d.shm.SetSpin(autoSpin(max(len(near)+1, onMachine), runtime.NumCPU()))
	}
	if f > 1 {
		d.shm.SetNap(time.Duration(f) * shm.DefaultNap) // idle rings wake their process less often
		d.shm.SetHandshakeTimeout(time.Duration(f) * d.shmHandshake)
	}
	nearPeers := make([]transport.Proc, 0, len(near))
	for p := range near {
		nearPeers = append(nearPeers, p)
	}
	return route.New(route.Config{Near: d.shm, Far: d.tcp, NearPeers: nearPeers})
}

// Close closes the transports (before the runtime owns them).
func (d *dataPlane) Close() {
	d.tcp.Close()
	if d.shm != nil {
		d.shm.Close()
	}
}

// autoSpin is the shared-memory spin when PGAS_SHM_SPIN is unset, for a
// host running local of the job's processes on cpus CPUs: polling pays
// only when every process can have a CPU of its own (measured with
// bench/shm: 4 ranks on 2 CPUs wait less with 0).
func autoSpin(local, cpus int) time.Duration {
	if local <= cpus {
		return shm.DefaultSpin
	}
	return 0
}
