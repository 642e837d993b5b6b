package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// A process started after the job formed (PGAS_JOIN=1: a replacement
// that gaspirun --respawn started, a pod that Kubernetes recreated, or a
// process started by hand) joins it as a new spare:
//
//  1. it binds its listeners (data plane, Raft, control RPC) before it
//     knows its id, since its member record carries their addresses;
//  2. the rendezvous admits it with the job's token and gives it a new
//     process id (one the launcher reserved, or the next free one: ids are
//     never reused, fencing keys on them) and the job's original member
//     table;
//  3. it starts its membership node with Join: the node proposes AddSpare
//     for itself through any member and waits until its own state holds
//     it (JoinSelf), bounded by joinTimeout;
//  4. the runtime starts over TCP alone (a joiner shares no memory with
//     the processes of its host), learns the addresses of everyone who
//     joined before from the membership's view, and waits as a spare, or
//     holds at once a rank that was waiting for a replacement.
//
// Everyone else learns the joiner from the view that lists it
// (pgas.View.Joined) and connects to it lazily, like to anyone.

// ErrCannotJoin: a process started to join a running job could not reach
// its membership within the bound. ExitCode maps it to ExitNoRendezvous.
var ErrCannotJoin = errors.New("pgas: init: could not join the running job")

// joinTimeout bounds the membership step of a join (the rendezvous step
// is bounded by PGAS_RENDEZVOUS_TIMEOUT): the leader must commit the
// AddSpare and this process must learn it.
const joinTimeout = 60 * time.Second

// join is Init for a process started after the job formed.
func join(ctx context.Context, env bootstrap.Env, opts Options, logs logs, extra map[string]string, raftLn, ctlLn net.Listener, o *observer) (*pgas.Runtime, error) {
	if !opts.FaultTolerant {
		return nil, fmt.Errorf("%w: PGAS_JOIN=1 needs a fault-tolerant program (job.Options.FaultTolerant): a plain job cannot take in a process after it formed", bootstrap.ErrEnv)
	}
	dataLn, addr, err := listen(env, o.faults)
	if err != nil {
		return nil, fmt.Errorf("pgas: init: data-plane listener: %w", err)
	}
	self := bootstrap.Member{Proc: env.Proc, Addr: addr, Host: env.Host, Pid: os.Getpid(), Extra: extra}
	sess, table, id, err := bootstrap.JoinRunning(ctx, clientConfig(env, logs), env, self)
	if err != nil {
		dataLn.Close()
		if errors.Is(err, bootstrap.ErrJobFinished) {
			return nil, fmt.Errorf("%w: the job finished before this process could join", pgas.ErrNotPromoted)
		}
		return nil, fmt.Errorf("pgas: init: rendezvous (joining a running job): %w", err)
	}
	env.Proc, env.NumProcs, env.NumRanks = id, table.NumProcs(), table.NumRanks
	o.proc = int(id)
	logs.runtime.Info("admitted to the running job", "proc", id, "job", table.JobID, "procs_at_start", table.NumProcs())
	data, err := joinerTransport(env, table, dataLn, o.faults, logs.tcp, opts.TCP)
	if err != nil {
		sess.Close()
		return nil, err
	}
	m, err := joinMembership(ctx, env, table, opts, logs, addr, extra, raftLn, ctlLn, o.faults)
	if err != nil {
		data.Close()
		sess.Close()
		return nil, err
	}
	cfg, err := runtimeConfig(env, table, opts, data, m, logs, sess, o)
	if err != nil {
		data.Close()
		sess.Close()
		m.Close()
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	return launchRuntime(ctx, cfg, env, sess, o)
}

// joinerTransport is a joiner's data plane: TCP on the listener it bound
// before it had an id, to the job's original processes (those that joined
// since are added from the membership's views).
func joinerTransport(env bootstrap.Env, table bootstrap.Table, ln net.Listener, inj *netfault.Injector, log *slog.Logger, adjust func(*tcp.Config)) (*tcp.Transport, error) {
	tc := tcp.DefaultConfig()
	tc.Self = transport.Proc(env.Proc)
	tc.Token, tc.TLS = env.Token, env.TLS
	tc.Listener = ln
	if inj != nil {
		tc.WrapConn = inj.Wrap
	}
	tc.Logger = log.With("proc", int(env.Proc), "layer", "tcp")
	spin, auto, err := tcpSpin(os.LookupEnv)
	if err != nil {
		ln.Close()
		return nil, err
	}
	auto = adjustTCP(&tc, adjust, spin, auto)
	tr, err := tcp.New(tc)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("pgas: init: data plane: %w", err)
	}
	peers := make(map[transport.Proc]string, len(table.Members))
	for _, m := range table.Members {
		peers[transport.Proc(m.Proc)] = m.Addr
	}
	if err := tr.SetPeers(peers); err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: data plane: %w", err)
	}
	if f, _ := stretch(table); f > 1 {
		tr.SetHandshakeTimeout(time.Duration(f) * tr.HandshakeTimeout()) // as connect does
	}
	if auto {
		tr.SetPollSpin(autoTCPSpin(machineMembers(table, env.Host, thisMachine())+1, runtime.NumCPU())) // the table is the job's before this process
	}
	return tr, nil
}

// joinMembership starts a joiner's membership node and has it add itself
// to the job's pool, within joinTimeout.
func joinMembership(ctx context.Context, env bootstrap.Env, table bootstrap.Table, opts Options, logs logs, addr string, extra map[string]string, raftLn, ctlLn net.Listener, inj *netfault.Injector) (*spares.Membership, error) {
	mc, f, worst := membershipConfig(env, table, opts, logs, raftLn, ctlLn, inj)
	if env.DeathAborts && mc.Shrink {
		return nil, ErrShrinkAborts
	}
	mc.Join = true
	mc.Self = spares.Member{Proc: env.Proc, Host: env.Host, Addr: addr, RaftAddr: extra["raft"], CtlAddr: extra["ctl"], Spare: true}
	for _, c := range table.Joined {
		mc.Contacts = append(mc.Contacts, spares.Member{Proc: c.Proc, Host: c.Host, Addr: c.Addr,
			RaftAddr: c.Extra["raft"], CtlAddr: c.Extra["ctl"], Spare: true})
	}
	m, err := newMembership(mc, f, worst)
	if err != nil {
		return nil, fmt.Errorf("pgas: init: membership: %w", err)
	}
	jctx, cancel := context.WithTimeout(ctx, max(joinTimeout, mc.CutOff))
	defer cancel()
	if err := m.Node().JoinSelf(jctx); err != nil {
		m.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pgas: init: joining the running job: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: the membership did not add process %d within %v (%v); check that the job still runs and that this host can reach its processes' addresses", ErrCannotJoin, env.Proc, max(joinTimeout, mc.CutOff), err)
	}
	return m, nil
}
