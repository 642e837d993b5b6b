package health

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gaspigo/gaspigo/transport"
)

// simNet runs N Cores against each other in one goroutine: a deterministic
// network with a seeded RNG for delays and drops, and the faults of a real
// job (SIGKILL, silent crash, SIGSTOP, partitions, cut links).
//
// One step of the network is one tick for every running Core:
//  1. messages due at this step are delivered, in (due, send order) order;
//  2. every running Core ticks;
//  3. every Core's output is queued, each message due 1+ ticks later.
type simNet struct {
	cfg      CoreConfig
	now      uint64
	cores    []*Core
	state    []procState
	faultAt  []uint64 // step of the last fault injected on each process
	pausedAt []uint64 // step each paused process stopped at
	holdTo   []uint64 // messages to a process wait until this step (its reader is behind)
	noLate   bool     // resume does not report the stall (a driver that does not measure it)
	queue    []simMsg
	order    uint64
	rng      *rand.Rand
	minDelay int
	maxDelay int
	dropRate float64
	group    map[transport.Proc]int // partition groups; nil when healed
	cut      map[[2]transport.Proc]bool
	events   []simEvent
	sent     []uint64 // messages sent by each process
	onEvent  func(simEvent)
}

type procState uint8

const (
	running procState = iota
	paused            // SIGSTOP or starved: no ticks; messages to it wait
	killed            // SIGKILL: connections close, so peers get PeerDown
	crashed           // silent death: messages to it vanish
)

func (s procState) String() string {
	return [...]string{"running", "paused", "killed", "crashed"}[s]
}

type simMsg struct {
	at       uint64
	order    uint64
	from, to transport.Proc
	msg      Message
	peerDown bool // deliver as to.PeerDown(from)
}

type simEvent struct {
	step     uint64
	observer transport.Proc
	ev       Event
}

func (e simEvent) String() string {
	return fmt.Sprintf("t=%d %d %v %d: %s", e.step, e.observer, e.ev.Kind, e.ev.Proc, e.ev.Reason)
}

func newSimNet(cfg CoreConfig, n int, seed uint64) (*simNet, error) {
	s := &simNet{
		cfg: cfg, state: make([]procState, n), faultAt: make([]uint64, n), sent: make([]uint64, n),
		pausedAt: make([]uint64, n), holdTo: make([]uint64, n),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), minDelay: 1, maxDelay: 1,
	}
	members := make([]transport.Proc, n)
	for i := range members {
		members[i] = transport.Proc(i)
	}
	for i := range n {
		c, err := NewCore(cfg, transport.Proc(i), members)
		if err != nil {
			return nil, err
		}
		s.cores = append(s.cores, c)
	}
	return s, nil
}

func (s *simNet) alive(p transport.Proc) bool {
	st := s.state[p]
	return st == running || st == paused
}

func (s *simNet) reachable(from, to transport.Proc) bool {
	if s.cut[[2]transport.Proc{from, to}] {
		return false
	}
	return s.group == nil || s.group[from] == s.group[to]
}

func (s *simNet) enqueue(m simMsg, delay int) {
	s.order++
	m.order = s.order
	m.at = s.now + uint64(delay)
	s.queue = append(s.queue, m)
}

func (s *simNet) delay() int {
	return s.minDelay + s.rng.IntN(s.maxDelay-s.minDelay+1)
}

// send models the transport for one message from a running Core.
func (s *simNet) send(from transport.Proc, o Outgoing) {
	s.sent[from]++
	if int(o.To) >= len(s.cores) {
		return
	}
	switch s.state[o.To] {
	case killed:
		// The connection is closed: the send fails at once.
		s.enqueue(simMsg{from: o.To, to: from, peerDown: true}, s.minDelay)
		return
	case crashed:
		return
	}
	if s.dropRate > 0 && s.rng.Float64() < s.dropRate {
		return
	}
	s.enqueue(simMsg{from: from, to: o.To, msg: o.Msg}, s.delay())
}

// step advances the network by one tick.
func (s *simNet) step() {
	s.now++
	var due, later []simMsg
	for _, m := range s.queue {
		if m.at <= s.now && s.state[m.to] != paused && s.now >= s.holdTo[m.to] {
			due = append(due, m)
		} else {
			later = append(later, m)
		}
	}
	s.queue = later
	slices.SortFunc(due, func(a, b simMsg) int {
		if a.at != b.at {
			return int(a.at) - int(b.at)
		}
		return int(a.order) - int(b.order)
	})
	for _, m := range due {
		if s.state[m.to] != running {
			continue
		}
		if m.peerDown {
			s.cores[m.to].PeerDown(m.from)
			continue
		}
		if !s.reachable(m.from, m.to) {
			continue
		}
		s.cores[m.to].Receive(m.from, m.msg)
	}
	for i, c := range s.cores {
		if s.state[i] == running {
			c.Tick()
		}
	}
	s.collect()
}

// collect queues every Core's output and records its events.
func (s *simNet) collect() {
	for i, c := range s.cores {
		if s.state[i] != running {
			continue
		}
		out, evs := c.Ready()
		for _, o := range out {
			s.send(transport.Proc(i), o)
		}
		for _, ev := range evs {
			se := simEvent{step: s.now, observer: transport.Proc(i), ev: ev}
			s.events = append(s.events, se)
			if s.onEvent != nil {
				s.onEvent(se)
			}
		}
	}
}

func (s *simNet) run(steps int) {
	for range steps {
		s.step()
	}
}

func (s *simNet) kill(p transport.Proc) {
	s.state[p] = killed
	s.faultAt[p] = s.now
	for i := range s.cores {
		if q := transport.Proc(i); q != p && s.alive(q) {
			s.enqueue(simMsg{from: p, to: q, peerDown: true}, s.minDelay)
		}
	}
}

func (s *simNet) crash(p transport.Proc) {
	s.state[p] = crashed
	s.faultAt[p] = s.now
}

func (s *simNet) pause(p transport.Proc) {
	if s.state[p] != running {
		return
	}
	s.state[p] = paused
	s.faultAt[p] = s.now
	s.pausedAt[p] = s.now
}

// resume continues a paused process. Its driver sees that its clock
// skipped the steps it was stopped for and reports them (Core.Late) before
// its next tick, as Detector does. The messages that waited for it reach
// its Core only after backlog more ticks: its timer fires before its
// reader catches up, as when a stopped Go process continues.
func (s *simNet) resume(p transport.Proc, backlog int) {
	if s.state[p] != paused {
		return
	}
	s.state[p] = running
	if !s.noLate {
		s.cores[p].Late(int(s.now - s.pausedAt[p]))
	}
	s.holdTo[p] = s.now + 1 + uint64(backlog)
}

func (s *simNet) partition(groups [][]transport.Proc) {
	s.group = map[transport.Proc]int{}
	for i := range s.cores {
		s.group[transport.Proc(i)] = len(groups)
		s.faultAt[i] = s.now
	}
	for g, ps := range groups {
		for _, p := range ps {
			s.group[p] = g
		}
	}
}

func (s *simNet) cutLink(a, b transport.Proc) {
	if s.cut == nil {
		s.cut = map[[2]transport.Proc]bool{}
	}
	s.faultAt[a], s.faultAt[b] = s.now, s.now
	s.cut[[2]transport.Proc{a, b}] = true
	s.cut[[2]transport.Proc{b, a}] = true
}

func (s *simNet) heal() {
	s.group, s.cut = nil, nil
}

// setMembers gives every Core that still runs (or is paused) a new view,
// and collects the output.
func (s *simNet) setMembers(members []transport.Proc) error {
	for i, c := range s.cores {
		if s.alive(transport.Proc(i)) {
			if err := c.SetMembers(members); err != nil {
				return err
			}
		}
	}
	s.collect()
	return nil
}

// firstConfirmation returns the first event confirming p (by observer by,
// or by anyone when by is NoProc).
func (s *simNet) firstConfirmation(p, by transport.Proc) (simEvent, bool) {
	for _, e := range s.events {
		if e.ev.Kind == Confirmed && e.ev.Proc == p && (by == transport.NoProc || e.observer == by) {
			return e, true
		}
	}
	return simEvent{}, false
}
