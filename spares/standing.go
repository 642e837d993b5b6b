package spares

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// standing is one process's account of another (the asker) in its applied
// state: the answer to a ctlOpStanding request. Only committed facts are
// in it, so a responder that is itself behind can only say too little,
// never something false: a process declared failed stays failed in every
// later state.
type standing struct {
	Code     string // codeOK, or why there is no answer
	Msg      string
	Epoch    uint64    // the responder's applied epoch
	Status   jobStatus // the job's status there
	Reason   string    // state.StatusReason
	FailedIn uint64    // epoch in which the asker was declared failed; 0: it was not
	Rank     int       // the rank the asker holds there; -1: none
	Known    bool      // the asker is in the responder's Procs
}

func encodeStanding(s standing) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if len(s.Msg) > 1024 {
		s.Msg = s.Msg[:1024]
	}
	if len(s.Reason) > 1024 {
		s.Reason = s.Reason[:1024]
	}
	rank := uint64(0)
	if s.Rank >= 0 {
		rank = uint64(s.Rank) + 1
	}
	err := wire.EncAll(e.EncodeArrayLen(8), e.EncodeString(s.Code), e.EncodeString(s.Msg), e.EncodeUint(s.Epoch),
		e.EncodeUint(uint64(s.Status)), e.EncodeString(s.Reason), e.EncodeUint(s.FailedIn), e.EncodeUint(rank), e.EncodeBool(s.Known))
	return buf.Bytes(), err
}

func decodeStanding(b []byte) (standing, error) {
	var s standing
	d := wire.NewDec(b, errProtocol)
	if n := d.ArrayLen(8); d.Err() == nil && n != 8 {
		return s, fmt.Errorf("%w: standing has %d fields, want 8", errProtocol, n)
	}
	s.Code = d.Str(64)
	s.Msg = d.Str(1024)
	s.Epoch = d.Uint(^uint64(0))
	s.Status = jobStatus(d.Uint(uint64(statusFailed)))
	s.Reason = d.Str(1024)
	s.FailedIn = d.Uint(^uint64(0))
	s.Rank = int(d.Uint(maxProcs+1)) - 1
	s.Known = d.Bool()
	return s, d.Finish()
}

// standingOf describes proc in st.
func standingOf(st *state, proc uint32) standing {
	s := standing{Code: codeOK, Epoch: st.Epoch, Status: st.Status, Reason: st.StatusReason, Rank: -1}
	s.Known = st.Procs.has(proc)
	s.FailedIn, _ = st.IsFailed(proc)
	if r, ok := st.RankOf(proc); ok {
		s.Rank = r
	}
	return s
}

// verdict is what a process must stop with, given a standing from proc
// from, or nil when the answer changes nothing for it (Raft, or the
// cut-off bound, decide then).
func verdict(s standing, from uint32) error {
	if s.Code != codeOK || !s.Known {
		return nil
	}
	switch {
	case s.FailedIn > 0:
		return fmt.Errorf("%w in epoch %d (proc %d's committed view, asked while out of contact with the membership): %w",
			ErrDeclaredFailed, s.FailedIn, from, pgas.ErrFenced)
	case s.Status == statusFailed:
		st := state{Epoch: s.Epoch, Status: s.Status, StatusReason: s.Reason}
		return fmt.Errorf("%w (proc %d's committed view, asked while out of contact with the membership)", statusErr(&st), from)
	case s.Status == statusFinished && s.Rank < 0:
		return fmt.Errorf("%w at epoch %d without promoting this process (proc %d's committed view, asked while out of contact with the membership): %w",
			errJobFinished, s.Epoch, from, pgas.ErrNotPromoted)
	}
	return nil
}

// answerStanding serves a ctlOpStanding request on c, whose handshake
// proved the asker's proc.
func (n *Node) answerStanding(c *authConn) {
	var s standing
	n.fsm.read(func(st *state, _ uint64) { s = standingOf(st, c.peer) })
	body, err := encodeStanding(s)
	if err == nil {
		err = writeFrame(c, body)
	}
	if err != nil {
		n.log.Debug("spares: standing reply failed", "peer", c.peer, "err", err)
	}
}

// askStanding asks the process at addr for this process's standing.
func (n *Node) askStanding(ctx context.Context, addr string) (standing, uint32, error) {
	c, err := n.dialCtl(ctx, addr)
	if err != nil {
		return standing{}, noProc, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := encodeCtlRequest(ctlOpStanding, []byte{})
	if err == nil {
		err = writeFrame(c, req)
	}
	var body []byte
	if err == nil {
		body, err = readFrame(c)
	}
	if err != nil {
		return standing{}, c.peer, fmt.Errorf("spares: standing from %s: %w", addr, err)
	}
	s, err := decodeStanding(body)
	return s, c.peer, err
}

// standingTargets picks whom to ask in round: every voter this process
// knows of, and two other live processes in turn (the voters may have
// changed while it was cut off).
func standingTargets(st *state, self uint32, round int) []uint32 {
	var voters, others []uint32
	for p, info := range st.Procs.all() {
		if p == self || info.CtlAddr == "" {
			continue
		}
		if _, failed := st.Failed[p]; failed {
			continue
		}
		if st.IsVoter(p) {
			voters = append(voters, p)
		} else {
			others = append(others, p)
		}
	}
	slices.Sort(voters)
	slices.Sort(others)
	for i := 0; i < 2 && i < len(others); i++ {
		voters = append(voters, others[(2*round+i)%len(others)])
	}
	return voters
}

// queryStanding runs one round of standing questions and stops this
// process if an answer says it must. It signals on quorum as soon as a
// majority of the voters it knows (itself included if it votes) has
// answered, which is contact with a quorum, and on done at the end of the
// round.
func (n *Node) queryStanding(round int, quorum, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	st, _ := n.fsm.view()
	targets := standingTargets(&st, n.cfg.Proc, round)
	votes := 0
	if st.IsVoter(n.cfg.Proc) {
		votes++
	}
	signalled := false
	countVote := func() {
		votes++
		if !signalled && votes > len(st.Voters)/2 {
			signalled = true
			select {
			case quorum <- struct{}{}:
			default: // one is pending already: the driver sees contact
			}
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, standingTimeout(&n.cfg))
	defer cancel()
	type answer struct {
		s    standing
		from uint32
		err  error
	}
	answers := make(chan answer, len(targets))
	asked := 0
	for _, p := range targets {
		addr := st.Procs.info(p).CtlAddr
		if n.goFunc(func() {
			s, from, err := n.askStanding(ctx, addr)
			answers <- answer{s, from, err}
		}) {
			asked++
		}
	}
	reached := 0
	var lastErr error
	for range asked {
		a := <-answers
		if a.err != nil {
			lastErr = a.err
			continue
		}
		reached++
		if st.IsVoter(a.from) {
			countVote()
		}
		if err := verdict(a.s, a.from); err != nil {
			n.lose(err)
			cancel()
		}
	}
	n.log.Debug("spares: asked for this process's standing", "asked", targets, "reached", reached, "voters_reached", votes, "last_err", lastErr)
}

// standingTimeout bounds one round of standing questions: long enough for
// a responder on a starved host (handshakes then take seconds), short
// enough for a few rounds before the cut-off bound.
func standingTimeout(c *Config) time.Duration {
	return max(2*c.StandingInterval, c.HandshakeTimeout, c.CutOff/4)
}

// lost is closed when this node gives up on its process: cut off from the
// membership's quorum for longer than Config.CutOff, or told by another
// process, while out of contact, that it was declared failed (or that the
// job ended without it). lostErr says which.
func (n *Node) lost() <-chan struct{} { return n.lostCh }

// lostErr is why lost was closed: a *cutOffError (ErrCutOff), an error
// wrapping ErrDeclaredFailed and pgas.ErrFenced, ErrSparesExhausted or
// ErrJobFailed, or errJobFinished with pgas.ErrNotPromoted (an idle spare
// of a job that finished). nil while lost is open.
func (n *Node) lostErr() error {
	select {
	case <-n.lostCh:
		return n.lossErr
	default:
		return nil
	}
}

// lose gives up on this process with err; the first call wins.
func (n *Node) lose(err error) {
	n.lostOnce.Do(func() {
		n.lossErr = err
		close(n.lostCh)
		n.log.Error("spares: giving up on this process", "err", err)
	})
}

// watchContact drives contactCore with the real clock and Raft's state:
// the cut-off rule and the standing questions (see contact.go).
func (n *Node) watchContact() {
	core := newContactCore(contactConfigOf(&n.cfg))
	t := time.NewTicker(n.cfg.ContactTick)
	defer t.Stop()
	quorum, done := make(chan struct{}, 1), make(chan struct{}, 1) // one round at a time
	round := 0
	for {
		select {
		case <-n.closeCh:
			return
		case <-n.lostCh:
			return
		case <-quorum:
			core.reached()
			continue
		case <-done:
			core.queryDone()
			continue
		case <-t.C:
		}
		now := time.Now()
		last := n.contactTime(now)
		step := core.tick(now, contactObs{Leader: n.IsLeader(), LastContact: last, Window: n.contactWindow()})
		switch {
		case step.CutOff:
			st, _ := n.fsm.view()
			leader, _ := n.leader()
			n.lose(&cutOffError{Proc: n.cfg.Proc, Silent: step.Silent, Bound: step.Bound, LastContact: last, Leader: leader, Voters: slices.Clone(st.Voters)})
			return
		case step.Warn:
			n.log.Warn("spares: no contact with a membership quorum; asking the other processes whether this one was replaced, and giving up if none answers in time",
				"silent", step.Silent.Round(time.Millisecond), "gives_up_after", step.Bound)
		case step.Lost:
			n.log.Info("spares: no contact with the Raft leader; asking the other processes for this one's standing",
				"silent", step.Silent.Round(time.Millisecond))
		case step.Regained:
			n.log.Info("spares: contact with the membership quorum is back")
		}
		if step.Query {
			r := round
			round++
			if !n.goFunc(func() { n.queryStanding(r, quorum, done) }) {
				return
			}
		}
	}
}
