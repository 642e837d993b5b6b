// Package memnet is a network for package spares's membership nodes
// inside one process (spares.Config.Network): Raft over
// raft.InmemTransport, control connections over net.Pipe, no handshake.
// It lets a test or a benchmark run thousands of nodes in one process,
// inside a testing/synctest bubble, counts every process's messages, and
// cuts processes and links off on demand.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Network is a spares.Network inside one process: Raft over
// raft.InmemTransport, control connections over net.Pipe, no handshake
// (the job token is not checked). It lets a test run thousands of Nodes
// in one process, inside a testing/synctest bubble when it is created
// there, and counts every process's messages. Addresses are arbitrary
// strings, unique per network. Safe for concurrent use.
type Network struct {
	timeout time.Duration

	mu     sync.Mutex
	ctl    map[string]*memListener
	raft   map[string]*memRaft
	counts map[uint32]*memCounts
	cut    map[uint32]bool    // partitioned processes
	silent map[uint32]bool    // processes cut off silently
	links  map[[2]uint32]bool // cut links, lower proc first
	conns  map[*memConn]struct{}
}

// MsgCounts is what one process sent and received on a Network: Raft
// RPCs (an append, a heartbeat, a vote, a snapshot each count one) and
// control frames (a request or an answer each count one).
type MsgCounts struct {
	RaftSent, RaftReceived uint64
	CtlSent, CtlReceived   uint64
}

// Total is every message counted, sent or received.
func (c MsgCounts) Total() uint64 { return c.RaftSent + c.RaftReceived + c.CtlSent + c.CtlReceived }

type memCounts struct {
	raftSent, raftRecv, ctlSent, ctlRecv atomic.Uint64
}

// New returns an empty network whose Raft RPCs time out after
// timeout (a peer that does not take a message: 500ms is raft's default).
func New(timeout time.Duration) *Network {
	return &Network{timeout: timeout, ctl: map[string]*memListener{}, raft: map[string]*memRaft{}, counts: map[uint32]*memCounts{},
		cut: map[uint32]bool{}, silent: map[uint32]bool{}, links: map[[2]uint32]bool{}, conns: map[*memConn]struct{}{}}
}

// noProc is the peer of a dial that failed (package spares's noProc).
const noProc = ^uint32(0)

// errMemCut is what a partitioned process's connections and dials fail
// with.
var errMemCut = errors.New("spares: memory network: partitioned")

// Partition cuts proc off: its control connections end, and until Heal
// every dial and Raft RPC from or to it fails.
func (m *Network) Partition(proc uint32) {
	m.mu.Lock()
	m.cut[proc] = true
	var cut []*memConn
	for c := range m.conns {
		if c.selfProc == proc || c.peerProc == proc {
			cut = append(cut, c)
		}
	}
	m.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// Silence cuts proc off silently, as a host whose packets are dropped
// without an answer: until Heal its control connections stay open but
// carry nothing more either way (a reader waits for its deadline), a
// control dial from or to it waits until its context ends (over TCP: the
// connect time-out), and its Raft RPCs fail as under Partition.
func (m *Network) Silence(proc uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.silent[proc] = true
}

// Heal ends proc's partition or silence.
func (m *Network) Heal(proc uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cut, proc)
	delete(m.silent, proc)
}

// CutLink cuts the link between a and b only: their connections end and,
// until HealLink, dials and Raft RPCs between them fail.
func (m *Network) CutLink(a, b uint32) {
	m.mu.Lock()
	m.links[linkKey(a, b)] = true
	var cut []*memConn
	for c := range m.conns {
		if linkKey(c.selfProc, c.peerProc) == linkKey(a, b) {
			cut = append(cut, c)
		}
	}
	m.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// HealLink ends the cut of the link between a and b.
func (m *Network) HealLink(a, b uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.links, linkKey(a, b))
}

func linkKey(a, b uint32) [2]uint32 { return [2]uint32{min(a, b), max(a, b)} }

func (m *Network) isCut(a, b uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cutLocked(a, b)
}

func (m *Network) cutLocked(a, b uint32) bool {
	return m.cut[a] || m.cut[b] || m.silent[a] || m.silent[b] || m.links[linkKey(a, b)]
}

func (m *Network) isSilent(a, b uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.silent[a] || m.silent[b]
}

// Counts returns proc's message counts so far.
func (m *Network) Counts(proc uint32) MsgCounts {
	c := m.counter(proc)
	return MsgCounts{RaftSent: c.raftSent.Load(), RaftReceived: c.raftRecv.Load(), CtlSent: c.ctlSent.Load(), CtlReceived: c.ctlRecv.Load()}
}

func (m *Network) counter(proc uint32) *memCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counts[proc]
	if c == nil {
		c = &memCounts{}
		m.counts[proc] = c
	}
	return c
}

// RaftTransport implements spares.Network: an InmemTransport connected both ways
// to every open one.
func (m *Network) RaftTransport(proc uint32, addr string) (raft.Transport, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.raft[addr]; dup {
		return nil, fmt.Errorf("spares: memory network: raft address %q in use", addr)
	}
	_, in := raft.NewInmemTransportWithTimeout(raft.ServerAddress(addr), m.timeout)
	t := &memRaft{InmemTransport: in, net: m, proc: proc, addr: addr}
	for a, o := range m.raft {
		in.Connect(raft.ServerAddress(a), o.InmemTransport)
		o.InmemTransport.Connect(raft.ServerAddress(addr), in)
	}
	m.raft[addr] = t
	return t, nil
}

// ServeCtl implements spares.Network: serve is given each connection
// dialed to addr, with the dialing process.
func (m *Network) ServeCtl(proc uint32, addr string, serve func(c net.Conn, peer uint32)) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.ctl[addr]; dup {
		return nil, fmt.Errorf("spares: memory network: control address %q in use", addr)
	}
	l := &memListener{net: m, proc: proc, addr: addr, serve: serve, done: make(chan struct{}), live: map[*memConn]struct{}{}}
	m.ctl[addr] = l
	return l, nil
}

// DialCtl implements spares.Network. An address nobody listens on is refused
// (syscall.ECONNREFUSED), as over TCP.
func (m *Network) DialCtl(ctx context.Context, from uint32, addr string) (net.Conn, uint32, error) {
	m.mu.Lock()
	l := m.ctl[addr]
	m.mu.Unlock()
	if l == nil {
		return nil, noProc, fmt.Errorf("spares: memory network: dial %s: %w", addr, syscall.ECONNREFUSED)
	}
	if m.isSilent(from, l.proc) {
		<-ctx.Done()
		return nil, noProc, fmt.Errorf("spares: memory network: dial %s: %w", addr, ctx.Err())
	}
	if m.isCut(from, l.proc) {
		return nil, noProc, fmt.Errorf("spares: memory network: dial %s: %w", addr, errMemCut)
	}
	a, b := net.Pipe()
	client := &memConn{Conn: a, net: m, self: m.counter(from), peer: m.counter(l.proc), selfProc: from, peerProc: l.proc}
	// The server end knows its listener before anyone can reach it
	// through m.conns (CutLink closes what it finds there).
	server := &memConn{Conn: b, net: m, self: client.peer, peer: client.self, selfProc: l.proc, peerProc: from, l: l}
	m.mu.Lock()
	m.conns[client], m.conns[server] = struct{}{}, struct{}{}
	m.mu.Unlock()
	if !l.track(server) {
		a.Close()
		b.Close()
		return nil, noProc, fmt.Errorf("spares: memory network: dial %s: %w", addr, syscall.ECONNREFUSED)
	}
	if err := ctx.Err(); err != nil {
		a.Close()
		b.Close()
		return nil, noProc, err
	}
	l.serve(server, from)
	return client, l.proc, nil
}

// memRaft counts the RPCs of an InmemTransport and leaves the network on
// Close, so that its peers are refused at once, as a dead process's are.
type memRaft struct {
	*raft.InmemTransport
	net  *Network
	proc uint32
	addr string
	once sync.Once
}

var (
	_ raft.Transport   = (*memRaft)(nil)
	_ raft.WithClose   = (*memRaft)(nil)
	_ raft.WithPreVote = (*memRaft)(nil)
)

// count counts an RPC to target; it fails when either end is partitioned.
func (t *memRaft) count(target raft.ServerAddress) error {
	t.net.mu.Lock()
	o := t.net.raft[string(target)]
	cut := t.net.cut[t.proc] || t.net.silent[t.proc] || (o != nil && t.net.cutLocked(t.proc, o.proc))
	t.net.mu.Unlock()
	if cut {
		return fmt.Errorf("spares: memory network: raft to %s: %w", target, errMemCut)
	}
	t.net.counter(t.proc).raftSent.Add(1)
	if o != nil {
		t.net.counter(o.proc).raftRecv.Add(1)
	}
	return nil
}

func (t *memRaft) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.InmemTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &memPipeline{AppendPipeline: p, t: t, target: target}, nil
}

func (t *memRaft) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.count(target); err != nil {
		return err
	}
	return t.InmemTransport.AppendEntries(id, target, args, resp)
}

func (t *memRaft) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.count(target); err != nil {
		return err
	}
	return t.InmemTransport.RequestVote(id, target, args, resp)
}

func (t *memRaft) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := t.count(target); err != nil {
		return err
	}
	return t.InmemTransport.RequestPreVote(id, target, args, resp)
}

func (t *memRaft) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := t.count(target); err != nil {
		return err
	}
	return t.InmemTransport.InstallSnapshot(id, target, args, resp, data)
}

func (t *memRaft) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := t.count(target); err != nil {
		return err
	}
	return t.InmemTransport.TimeoutNow(id, target, args, resp)
}

// Close leaves the network: every peer forgets this transport.
func (t *memRaft) Close() error {
	t.once.Do(func() {
		t.net.mu.Lock()
		delete(t.net.raft, t.addr)
		others := make([]*memRaft, 0, len(t.net.raft))
		for _, o := range t.net.raft {
			others = append(others, o)
		}
		t.net.mu.Unlock()
		for _, o := range others {
			o.InmemTransport.Disconnect(raft.ServerAddress(t.addr))
		}
		_ = t.InmemTransport.Close()
	})
	return nil
}

type memPipeline struct {
	raft.AppendPipeline
	t      *memRaft
	target raft.ServerAddress
}

func (p *memPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if err := p.t.count(p.target); err != nil {
		return nil, err
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// memListener takes the control connections to one address of a
// Network. Close closes the connections it gave out, as the node's own
// listener does over TCP.
type memListener struct {
	net   *Network
	proc  uint32
	addr  string
	serve func(net.Conn, uint32)
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	live map[*memConn]struct{}
}

func (l *memListener) track(c *memConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		return false
	default:
	}
	l.live[c] = struct{}{}
	return true
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		l.net.mu.Lock()
		delete(l.net.ctl, l.addr)
		l.net.mu.Unlock()
		l.mu.Lock()
		close(l.done)
		live := make([]*memConn, 0, len(l.live))
		for c := range l.live {
			live = append(live, c)
		}
		l.mu.Unlock()
		for _, c := range live {
			c.Close()
		}
	})
	return nil
}

// memConn is one end of a control connection: it counts the frames
// written (spares writes a frame in one call) on both ends.
type memConn struct {
	net.Conn
	net                *Network
	self, peer         *memCounts
	selfProc, peerProc uint32
	l                  *memListener
}

func (c *memConn) Write(p []byte) (int, error) {
	if c.net.isSilent(c.selfProc, c.peerProc) {
		return len(p), nil // lost on the way
	}
	n, err := c.Conn.Write(p)
	if err == nil {
		c.self.ctlSent.Add(1)
		c.peer.ctlRecv.Add(1)
	}
	return n, err
}

func (c *memConn) Close() error {
	c.net.mu.Lock()
	delete(c.net.conns, c)
	c.net.mu.Unlock()
	if l := c.l; l != nil {
		l.mu.Lock()
		delete(l.live, c)
		l.mu.Unlock()
	}
	return c.Conn.Close()
}
