package pgas

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Atomic operation codes, carried in Header.Flags of FrameAtomicReq.
const (
	atomicFetchAdd uint8 = 1
	atomicCAS      uint8 = 2
)

// FetchAdd atomically adds add to the aligned 8-byte word at loc on rank and
// returns the word's previous value. It blocks until the answer arrives.
func (rt *Runtime) FetchAdd(ctx context.Context, rank int, loc Loc, add uint64) (uint64, error) {
	return rt.atomic(ctx, rank, loc, atomicFetchAdd, add, 0, "fetch_add")
}

// CompareSwap atomically replaces the aligned 8-byte word at loc on rank with
// swap if it equals cmp, and returns the value it had (equal to cmp when the
// swap happened).
func (rt *Runtime) CompareSwap(ctx context.Context, rank int, loc Loc, cmp, swap uint64) (uint64, error) {
	return rt.atomic(ctx, rank, loc, atomicCAS, cmp, swap, "compare_swap")
}

func (rt *Runtime) atomic(ctx context.Context, rank int, loc Loc, op uint8, a, b uint64, name string) (uint64, error) {
	defer oneSidedStart("atomic").done()
	v, err := rt.current()
	if err != nil {
		return 0, err
	}
	if loc.Off%8 != 0 {
		return 0, fmt.Errorf("pgas: %s: offset %d is not 8-byte aligned: %w", name, loc.Off, ErrInvalid)
	}
	if err := rt.checkRemote(rank, loc, 8, name); err != nil {
		return 0, err
	}
	proc, err := rt.procOf(v, rank, name)
	if err != nil {
		return 0, err
	}
	if proc == rt.self {
		return rt.localAtomic(uint16(loc.Seg), loc.Off, op, a, b)
	}
	req := rt.newRequest(proc, rank, nil)
	h := transport.Header{Type: transport.FrameAtomicReq, Flags: op, Seg: uint16(loc.Seg), Off: uint64(loc.Off), A: a, B: b, Seq: req.id}
	if err := rt.send(ctx, proc, &h, nil); err != nil {
		rt.dropRequest(req)
		return 0, rt.sendErr(ctx, err, rank, proc, name)
	}
	return rt.waitRequest(ctx, req, rank, name)
}

func (rt *Runtime) localAtomic(segID uint16, off int64, op uint8, a, b uint64) (uint64, error) {
	si, err := rt.pinSegApply(segID)
	if err != nil {
		return 0, err
	}
	defer si.unpinApply()
	w, err := si.seg.Word(off)
	if err != nil {
		return 0, fmt.Errorf("pgas: atomic at %d: %w: %v", off, ErrBounds, err)
	}
	switch op {
	case atomicFetchAdd:
		return w.Add(a) - a, nil
	case atomicCAS:
		for {
			old := w.Load()
			if old != a {
				return old, nil
			}
			if w.CompareAndSwap(a, b) {
				return a, nil
			}
		}
	}
	return 0, fmt.Errorf("pgas: atomic op %d: %w", op, ErrInvalid)
}

// MaxPassive is the largest passive message.
const MaxPassive = 1 << 20

// PassiveSend sends a small two-sided message to rank and returns once the
// target has queued it for PassiveReceive.
func (rt *Runtime) PassiveSend(ctx context.Context, rank int, msg []byte) error {
	const op = "passive_send"
	v, err := rt.current()
	if err != nil {
		return err
	}
	if len(msg) > MaxPassive {
		return fmt.Errorf("pgas: %s: %d bytes above MaxPassive %d: %w", op, len(msg), MaxPassive, ErrInvalid)
	}
	proc, err := rt.procOf(v, rank, op)
	if err != nil {
		return err
	}
	me := v.rankOf[rt.self]
	if proc == rt.self {
		if !rt.passive.push(me, append([]byte(nil), msg...)) {
			return fmt.Errorf("pgas: %s: own inbox full: %w", op, ErrRemote)
		}
		return nil
	}
	pr := rt.peers.get(proc)
	h := transport.Header{Type: transport.FramePassive, Flags: transport.FlagAck}
	pr.sendMu.Lock()
	h.Seq = pr.nextSeq.Add(1)
	err = rt.send(ctx, proc, &h, msg)
	pr.sendMu.Unlock()
	if err != nil {
		return rt.sendErr(ctx, err, rank, proc, op)
	}
	return rt.waitAck(ctx, pendingOp{rank: rank, peer: pr, seq: h.Seq, op: op})
}

// PassiveReceive returns the next passive message and the rank that sent it.
func (rt *Runtime) PassiveReceive(ctx context.Context) (from int, msg []byte, err error) {
	return rt.passive.pop(ctx, rt.closed)
}

// inbox is the bounded queue of passive messages.
type inbox struct {
	mu     sync.Mutex
	msgs   []passiveMsg
	bytes  int
	limit  int
	ready  chan struct{}
	closed bool
}

type passiveMsg struct {
	from int
	data []byte
}

func newInbox(limit int) *inbox { return &inbox{limit: limit, ready: make(chan struct{})} }

func (in *inbox) push(from int, b []byte) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.bytes+len(b) > in.limit {
		return false
	}
	in.msgs = append(in.msgs, passiveMsg{from, b})
	in.bytes += len(b)
	close(in.ready)
	in.ready = make(chan struct{})
	return true
}

func (in *inbox) pop(ctx context.Context, closed <-chan struct{}) (int, []byte, error) {
	for {
		in.mu.Lock()
		if len(in.msgs) > 0 {
			m := in.msgs[0]
			in.msgs = in.msgs[1:]
			in.bytes -= len(m.data)
			in.mu.Unlock()
			return m.from, m.data, nil
		}
		if in.closed {
			in.mu.Unlock()
			return 0, nil, ErrClosed
		}
		ch := in.ready
		in.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, nil, ctxError(ctx, "passive_receive")
		case <-closed:
			return 0, nil, ErrClosed
		}
	}
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
}

// spinOn polls ch for up to d and reports whether it closed.
func spinOn(ch <-chan struct{}, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		select {
		case <-ch:
			return true
		default:
		}
		if i&31 == 31 {
			if time.Now().After(deadline) {
				return false
			}
			runtime.Gosched()
		}
	}
}

func isRankFailed(err error) bool { return errors.Is(err, ErrRankFailed) }
