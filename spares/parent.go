package spares

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// The parent's side of the tree (follow.go has the child's): it answers
// each follow request with the news since the child's version, at once
// or after the hold, and with the leader and the contact it knows of.

// serveFollow answers a child's follow requests on c until it hangs up,
// the node closes or a request is bad. payload is the first request's.
func (n *Node) serveFollow(c *authConn, payload []byte) {
	for {
		have, full, err := decodeFollowRequest(payload)
		if err != nil {
			n.log.Warn("spares: bad follow request", "peer", c.peer, "err", err)
			return
		}
		a, ok := n.awaitNews(have, full)
		if !ok {
			return
		}
		body, err := encodeFollowAnswer(a)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(n.cfg.RPCTimeout))
			err = writeFrame(c, body)
		}
		if err != nil {
			n.log.Debug("spares: follow answer failed", "peer", c.peer, "err", err)
			return
		}
		n.treeServed.Add(1)
		// The child asks again as soon as it has applied the answer.
		_ = c.SetDeadline(time.Now().Add(n.cfg.treeHold() + n.cfg.RPCTimeout))
		req, err := readFrame(c)
		var op uint64
		if err == nil {
			op, payload, err = decodeCtlRequest(req)
		}
		if err == nil && op != ctlOpFollow {
			err = fmt.Errorf("%w: op %d on a follow connection", errProtocol, op)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !n.isClosed() {
				n.log.Debug("spares: follow connection ended", "peer", c.peer, "err", err)
			}
			return
		}
	}
}

// awaitNews waits up to TreeHold for a version above have and returns the
// answer; false when the node closes.
//
// A parent without contact with the quorum when the request comes (at
// start, before the first election, or while a leader is replaced)
// also answers as soon as it regains contact, so that its children learn
// it at once and do not start asking for their standing.
func (n *Node) awaitNews(have uint64, full bool) (followAnswer, bool) {
	t := time.NewTimer(n.cfg.treeHold())
	defer t.Stop()
	var poll <-chan time.Time
	if !n.inContact(time.Now()) {
		tk := time.NewTicker(max(n.cfg.treeHold()/16, time.Millisecond))
		defer tk.Stop()
		poll = tk.C
	}
	for {
		u, changed, err := n.fsm.newsFor(have, full)
		if err != nil {
			return followAnswer{Code: codeOf(err)}, true
		}
		if u.Version > have || full {
			return n.answer(u), true
		}
		select {
		case <-changed:
		case now := <-poll:
			if n.inContact(now) {
				return n.answer(u), true
			}
		case <-t.C:
			return n.answer(u), true
		case <-n.closeCh:
			return followAnswer{}, false
		}
	}
}

func (n *Node) answer(u update) followAnswer {
	a := followAnswer{Code: codeOK, Update: u, Leader: noProc}
	if p, ok := n.leader(); ok {
		a.Leader = p
	}
	now := time.Now()
	if t := n.contactTime(now); !t.IsZero() {
		a.Fresh, a.Age = true, now.Sub(t)
	}
	return a
}
