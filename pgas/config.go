package pgas

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/transport"
)

// Config describes one process of a job. Tests build it by hand over
// transport/mem; programs started by gaspirun use package job, which builds
// it from the launcher's environment.
type Config struct {
	// Proc is this process's ID, 0..NumProcs-1; or, for a process started
	// after the job formed to refill its spare pool (a joiner), the id the
	// rendezvous gave it, NumProcs or above (ids are never reused). A
	// joiner needs a Membership whose current view lists it in
	// View.Joined; it is a spare until a view gives it a rank.
	Proc transport.Proc
	// NumProcs is the number of processes the job formed with: ranks plus
	// spares. A joiner passes the job's original count too; the processes
	// that joined since are learnt from the views (View.Joined).
	NumProcs int
	// NumRanks is the number of ranks. Processes NumRanks..NumProcs-1 start
	// as spares.
	NumRanks int
	// Transport carries frames to the other processes. Init starts it and
	// Close closes it.
	Transport transport.Transport
	// Hosts gives the host label of each of the job's first NumProcs
	// processes (indexed by Proc), used for host-aware placement. Nil
	// means every process is on one host. A process that joined later is
	// on a host of its own for collectives and shares memory with no one
	// (Runtime.Host gives its label from the view).
	Hosts []string
	// Racks gives the rack (or switch) label of each of those processes,
	// indexed like Hosts, which it needs: collectives whose hosts share
	// racks add a level, so that one process per rack talks across racks
	// (docs/design.md §6.3). The processes of one host have one rack.
	// Nil means no rack level; a process that joined later is on a rack
	// of its own, as on a host of its own.
	Racks []string

	// NumQueues is the number of queues, 0..NumQueues-1.
	NumQueues int
	// QueueDepth is how many operations a queue may hold between two Waits.
	// Posting more gives ErrQueueFull: a full queue is an error, never a
	// silent stall.
	QueueDepth int
	// SpinWait is how long a waiting call (NotifyWaitSome, collectives,
	// Wait) polls before it parks its goroutine. Polling cuts the wake-up
	// latency of small messages from tens of microseconds to a few, at the
	// price of a busy core; keep it 0 on oversubscribed hosts. With one P
	// per process (GOMAXPROCS=1, as gaspirun sets on a host with a core per
	// rank) a spinning goroutine keeps the scheduler from polling the
	// network, so the message it waits for lands only when it parks: spin
	// at the socket instead (transport/tcp's PollSpin, job.Options.TCP).
	//
	// When 0, NotifyWaitSome on a segment whose slots peers set in memory
	// (DirectShm) still polls, as the ranks on this host against its CPUs
	// allow (directnote.go, chooseSpin): no frame has to land for the
	// value to be seen.
	SpinWait time.Duration
	// DirectShm shares segment memory with the processes of this host that
	// the transport reaches through shared memory (it reports them with an
	// IsNear(transport.Proc) bool method, as transport/route does, and
	// passes memory to them: transport.MemorySharer): a Write, WriteNotify
	// or Notify to one of them is done in its memory, without a frame
	// (direct.go, directnote.go). Segments and their notification slots
	// then live in memfds, moved to fresh ones when a process given them
	// failed. Off by default.
	DirectShm bool
	// Membership, when set, supplies committed views (epochs, the rank
	// table, failed processes) and takes failure reports. Without it the
	// rank table never changes and spares cannot be promoted. Init takes
	// ownership: Close closes it if it implements io.Closer.
	Membership Membership
	// Health, when set, runs the heartbeat failure detector with this
	// configuration; its confirmed failures go to Membership.
	Health *health.Config

	// Launcher, when set, receives the runtime's reports for the launcher
	// that started the process (vacant ranks, Runtime.Report). Init takes
	// ownership: Close closes it if it implements io.Closer.
	Launcher Launcher

	// Logger receives runtime events. Nil discards them.
	Logger *slog.Logger

	// FaultPoint, when set, is called at the runtime's fault points (the
	// Point* constants) and may kill the process there: the chaos suite's
	// faults that no signal from outside can aim at. Package job sets it
	// from PGAS_FAULTPOINT (internal/faultpoint). Nil: nothing is called.
	FaultPoint func(point string)

	// Faults, when set, holds this process's collectives in shared memory
	// as a faulty network holds its frames: Hold blocks while a partition
	// of this process is in force. The chaos suite's network faults, which
	// the transports apply to frames, would otherwise leave a process cut
	// off from the others meeting its host's members in memory, and a
	// job could end before anyone noticed the partition. Direct stores are
	// not held: a writer cut off from the network goes on storing, which
	// fencing must stop. Package job sets it from PGAS_NETFAULT_DIR
	// (internal/netfault). Nil: nothing is held.
	Faults interface {
		Hold(ctx context.Context, n int, send bool) error
	}
}

// The runtime's fault points (Config.FaultPoint).
const (
	// PointStoreWake: a store into a same-host peer's slot found a parked
	// waiter, and the wake-up frame has not gone yet (directnote.go, wake).
	PointStoreWake = "pgas.store-wake"
)

// faultPoint passes point to Config.FaultPoint, if set.
func (rt *Runtime) faultPoint(point string) {
	if f := rt.cfg.FaultPoint; f != nil {
		f(point)
	}
}

// DefaultConfig returns the settings for a job.
func DefaultConfig() Config {
	// No spinning by default: on a 2-core host a goroutine polling with
	// Gosched kept the thread that must deliver the peer's message off the
	// CPU, and made 8-byte round trips and 4-rank collectives slower
	// (cmd/gaspibench). Raise SpinWait on hosts with idle cores.
	return Config{NumQueues: 8, QueueDepth: 1024}
}

// LocalConfig returns settings for many processes sharing a few cores, as
// in tests: no spinning.
func LocalConfig() Config {
	return DefaultConfig()
}

// Validate checks the configuration without changing it.
func (c *Config) Validate() error {
	switch {
	case c.NumRanks < 1:
		return fmt.Errorf("%w: NumRanks is %d, want at least 1", ErrConfig, c.NumRanks)
	case c.NumProcs < c.NumRanks:
		return fmt.Errorf("%w: NumProcs %d is less than NumRanks %d", ErrConfig, c.NumProcs, c.NumRanks)
	case c.Proc == transport.NoProc:
		return fmt.Errorf("%w: Proc is NoProc; set it to this process's ID", ErrConfig)
	case int(c.Proc) >= c.NumProcs && c.Membership == nil:
		return fmt.Errorf("%w: Proc %d outside 0..%d, and no Membership: a process that joins a running job (an id from NumProcs on) learns the job from its membership", ErrConfig, c.Proc, c.NumProcs-1)
	case int(c.Proc) >= maxProcID:
		return fmt.Errorf("%w: Proc %d at or above %d, beyond what a job may have", ErrConfig, c.Proc, maxProcID)
	case c.Transport == nil:
		return fmt.Errorf("%w: Transport is nil", ErrConfig)
	case c.Transport.Self() != c.Proc:
		return fmt.Errorf("%w: Transport is for proc %d, Proc is %d", ErrConfig, c.Transport.Self(), c.Proc)
	case c.NumQueues < 1 || c.NumQueues > 1024:
		return fmt.Errorf("%w: NumQueues is %d, want 1..1024", ErrConfig, c.NumQueues)
	case c.QueueDepth < 1:
		return fmt.Errorf("%w: QueueDepth is %d, want at least 1", ErrConfig, c.QueueDepth)
	case c.SpinWait < 0:
		return fmt.Errorf("%w: SpinWait is %v, want >= 0", ErrConfig, c.SpinWait)
	case c.Health != nil && c.Membership == nil:
		return fmt.Errorf("%w: Health is set but Membership is nil: confirmed failures would go nowhere", ErrConfig)
	case c.Hosts != nil && len(c.Hosts) != c.NumProcs:
		return fmt.Errorf("%w: %d host labels for %d processes (a joiner passes the job's first NumProcs labels)", ErrConfig, len(c.Hosts), c.NumProcs)
	}
	return c.validateRacks()
}

// validateRacks checks Racks against Hosts: one label per process, and
// one rack for all the processes of a host.
func (c *Config) validateRacks() error {
	if c.Racks == nil {
		return nil
	}
	if c.Hosts == nil || len(c.Racks) != len(c.Hosts) {
		return fmt.Errorf("%w: %d rack labels for %d host labels: give a rack label for every process, with its host label", ErrConfig, len(c.Racks), len(c.Hosts))
	}
	rackOf := map[string]string{}
	for p, h := range c.Hosts {
		r, seen := rackOf[h]
		switch {
		case c.Racks[p] == "":
			return fmt.Errorf("%w: process %d (host %q) has an empty rack label", ErrConfig, p, h)
		case seen && r != c.Racks[p]:
			return fmt.Errorf("%w: host %q is on racks %q and %q: a host is on one rack", ErrConfig, h, r, c.Racks[p])
		}
		rackOf[h] = c.Racks[p]
	}
	return nil
}

// joiner reports whether this process joined the job after it formed.
func (c *Config) joiner() bool { return int(c.Proc) >= c.NumProcs }

// joinedIn checks that a joiner's membership knows it: the current view
// must list it in Joined (or give it a rank), or the runtime would wait
// as a process the job does not have.
func (c *Config) joinedIn(v View) error {
	if !c.joiner() || slices.ContainsFunc(v.Joined, func(j Joiner) bool { return j.Proc == c.Proc }) || slices.Contains(v.Ranks, c.Proc) {
		return nil
	}
	return fmt.Errorf("%w: proc %d joins a job of %d processes, but the membership's current view (epoch %d) does not list it in Joined: add it to the job (spares.AddSpare, Node.JoinSelf) before Init", ErrConfig, c.Proc, c.NumProcs, v.Epoch)
}
