package follow

import (
	"errors"
	"io"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/wire"
)

// The parent's side of the tree (follow.go has the child's): it answers
// each follow request with the news since the child's version, at once
// or after the hold, and with the leader and the contact it knows of.

// Serve answers a child's follow requests on c until it hangs up, the
// membership closes or a request is bad. payload is the first request's.
func (p *Proc) Serve(c Conn, payload []byte) {
	for {
		have, full, err := DecodeRequest(payload)
		if err != nil {
			p.cfg.Log.Warn("spares: bad follow request", "peer", c.Peer(), "err", err)
			return
		}
		a, ok := p.awaitNews(have, full)
		if !ok {
			return
		}
		body, err := EncodeAnswer(a)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(p.cfg.RPCTimeout))
			err = wire.WriteFrame(c, body, p.cfg.Limits.Frame())
		}
		if err != nil {
			p.cfg.Log.Debug("spares: follow answer failed", "peer", c.Peer(), "err", err)
			return
		}
		p.served.Add(1)
		// The child asks again as soon as it has applied the answer.
		_ = c.SetDeadline(time.Now().Add(p.cfg.Hold + p.cfg.RPCTimeout))
		payload, err = p.m.Next(c)
		if err != nil {
			if !errors.Is(err, io.EOF) && !p.closed() {
				p.cfg.Log.Debug("spares: follow connection ended", "peer", c.Peer(), "err", err)
			}
			return
		}
	}
}

// awaitNews waits up to Hold for a version above have and returns the
// answer; false when the membership closes.
//
// A parent without contact with the quorum when the request comes (at
// start, before the first election, or while a leader is replaced)
// also answers as soon as it regains contact, so that its children learn
// it at once and do not start asking for their standing.
func (p *Proc) awaitNews(have uint64, full bool) (Answer, bool) {
	t := time.NewTimer(p.cfg.Hold)
	defer t.Stop()
	var poll <-chan time.Time
	if !p.m.InContact(time.Now()) {
		tk := time.NewTicker(max(p.cfg.Hold/16, time.Millisecond))
		defer tk.Stop()
		poll = tk.C
	}
	for {
		u, changed, err := p.m.News(have, full)
		if err != nil {
			return Answer{Code: p.m.CodeOf(err)}, true
		}
		if u.Version > have || full {
			return p.answer(u), true
		}
		select {
		case <-changed:
		case now := <-poll:
			if p.m.InContact(now) {
				return p.answer(u), true
			}
		case <-t.C:
			return p.answer(u), true
		case <-p.cfg.Closed:
			return Answer{}, false
		}
	}
}

func (p *Proc) answer(u Update) Answer {
	a := Answer{Code: wire.CodeOK, Update: u, Leader: noProc}
	if l, ok := p.m.Leader(); ok {
		a.Leader = l
	}
	now := time.Now()
	if t := p.m.ContactTime(now); !t.IsZero() {
		a.Fresh, a.Age = true, now.Sub(t)
	}
	return a
}
