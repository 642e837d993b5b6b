package pgas

import (
	"context"
	"fmt"
	"sync"

	"github.com/gaspigo/gaspigo/transport"
)

// mailKey names one collective message.
type mailKey struct {
	epoch uint32
	tag   uint16
	seq   uint64
	round uint64
	from  transport.Proc
}

// mailbox holds collective messages until their collective asks for them.
type mailbox struct {
	mu     sync.Mutex
	slots  map[mailKey]*slot
	closed bool
}

type slot struct {
	data  []byte
	ready chan struct{}
	full  bool
}

func newMailbox() *mailbox { return &mailbox{slots: make(map[mailKey]*slot)} }

func (m *mailbox) slot(k mailKey) *slot {
	s := m.slots[k]
	if s == nil {
		s = &slot{ready: make(chan struct{})}
		m.slots[k] = s
	}
	return s
}

func (m *mailbox) deliver(from transport.Proc, h *transport.Header, p transport.Payload) error {
	// Allocate as []uint64 so typed views of the buffer are aligned.
	words := make([]uint64, (p.Len()+7)/8)
	buf := asBytes(words)[:p.Len()]
	if err := p.ReadInto(buf); err != nil {
		return err
	}
	k := mailKey{epoch: h.Epoch, tag: h.Seg, seq: h.Off, round: h.A, from: from}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	s := m.slot(k)
	if s.full {
		return fmt.Errorf("pgas: duplicate collective message from proc %d (tag %d seq %d round %d)", from, k.tag, k.seq, k.round)
	}
	s.data, s.full = buf, true
	close(s.ready)
	return nil
}

func (m *mailbox) wait(ctx context.Context, rt *Runtime, k mailKey, rank int, op string) ([]byte, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	s := m.slot(k)
	m.mu.Unlock()
	pr := rt.peers.get(k.from)
	if rt.cfg.SpinWait > 0 {
		spinOn(s.ready, rt.cfg.SpinWait) // then the select below returns at once
	}
	vc := rt.viewChan()
	for rt.member != nil && rt.view.Load().epoch == k.epoch {
		// Wake when the view changes: peers in the new epoch will not
		// finish a collective of the old one.
		select {
		case <-s.ready:
		case <-vc:
			vc = rt.viewChan()
			continue
		case <-pr.down:
		case <-ctx.Done():
		case <-rt.closed:
		}
		break
	}
	if rt.member != nil && rt.view.Load().epoch != k.epoch {
		select {
		case <-s.ready:
		default:
			return nil, fmt.Errorf("pgas: %s: epoch %d ended during the collective: %w", op, k.epoch, ErrStaleEpoch)
		}
	}
	select {
	case <-s.ready:
	case <-pr.down:
		select {
		case <-s.ready: // it arrived before the connection went
		default:
			if err := rt.halted(); err != nil {
				return nil, err // this process stopped, not the peer
			}
			return nil, &RankError{Rank: rank, Op: op, Err: ErrRankFailed}
		}
	case <-ctx.Done():
		if rt.det != nil {
			rt.det.Hint(k.from) // a timed-out collective is a hint, never a verdict
		}
		return nil, ctxError(ctx, op)
	case <-rt.closed:
		return nil, ErrClosed
	}
	m.mu.Lock()
	delete(m.slots, k)
	m.mu.Unlock()
	return s.data, nil
}

// purge drops messages of epochs older than epoch.
func (m *mailbox) purge(epoch uint32) {
	m.mu.Lock()
	for k := range m.slots {
		if k.epoch < epoch {
			delete(m.slots, k)
		}
	}
	m.mu.Unlock()
}

func (m *mailbox) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
