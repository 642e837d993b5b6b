package transporttest

import (
	"context"
	"fmt"
	"sync"

	"github.com/gaspigo/gaspigo/transport"
)

// Frame is one frame a Recorder received.
type Frame struct {
	From    transport.Proc
	Header  transport.Header
	Payload []byte // a copy, owned by the Recorder's caller once returned
}

// Down is one PeerDown call a Recorder received.
type Down struct {
	Peer transport.Proc
	Err  error
}

// Recorder is a transport.Handler that keeps every frame (with a copy of its
// payload) and every PeerDown call, and lets a test wait for them. The zero
// value is ready to use; it is safe for concurrent use.
type Recorder struct {
	// Reject, when non-nil, is asked about every frame after its payload
	// has been read; a non-nil result is returned from HandleFrame. The
	// frame is recorded either way. Set it before Start.
	Reject func(from transport.Proc, h *transport.Header) error

	mu     sync.Mutex
	frames []Frame
	downs  []Down
	wake   chan struct{} // closed and replaced on every change
}

var _ transport.Handler = (*Recorder)(nil)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// HandleFrame reads the payload into a fresh slice and records the frame.
// A payload whose length differs from the header's is still read and
// recorded (Header.Len and len(Payload) then disagree), and an error is
// returned.
func (r *Recorder) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	buf := make([]byte, p.Len())
	var err error
	if rerr := p.ReadInto(buf); rerr != nil {
		err = fmt.Errorf("transporttest: reading a %d-byte payload: %w", p.Len(), rerr)
	} else if p.Len() != int(h.Len) {
		err = fmt.Errorf("transporttest: payload length %d differs from header length %d", p.Len(), h.Len)
	}
	if err == nil && r.Reject != nil {
		err = r.Reject(from, h)
	}
	r.mu.Lock()
	r.frames = append(r.frames, Frame{From: from, Header: *h, Payload: buf})
	r.changedLocked()
	r.mu.Unlock()
	return err
}

// PeerDown records the call.
func (r *Recorder) PeerDown(peer transport.Proc, err error) {
	r.mu.Lock()
	r.downs = append(r.downs, Down{Peer: peer, Err: err})
	r.changedLocked()
	r.mu.Unlock()
}

// Frames returns a copy of the frames received so far, in arrival order.
func (r *Recorder) Frames() []Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Frame(nil), r.frames...)
}

// FramesFrom returns the frames received so far from one sender, in order.
func (r *Recorder) FramesFrom(from transport.Proc) []Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Frame
	for _, f := range r.frames {
		if f.From == from {
			out = append(out, f)
		}
	}
	return out
}

// Downs returns a copy of the PeerDown calls received so far, in order.
func (r *Recorder) Downs() []Down {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Down(nil), r.downs...)
}

// Wait blocks until cond, called with the frames and downs so far (which it
// must not keep or modify), returns true, or until ctx ends.
func (r *Recorder) Wait(ctx context.Context, cond func(frames []Frame, downs []Down) bool) error {
	for {
		r.mu.Lock()
		ok := cond(r.frames, r.downs)
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		nf, nd := len(r.frames), len(r.downs)
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("transporttest: waited with %d frames and %d peer-down calls recorded: %w", nf, nd, ctx.Err())
		}
	}
}

// WaitFrames waits until at least n frames have arrived and returns the
// first n.
func (r *Recorder) WaitFrames(ctx context.Context, n int) ([]Frame, error) {
	var out []Frame
	err := r.Wait(ctx, func(frames []Frame, _ []Down) bool {
		if len(frames) < n {
			return false
		}
		out = append([]Frame(nil), frames[:n]...)
		return true
	})
	return out, err
}

// WaitDown waits for a PeerDown call about peer and returns the first one.
func (r *Recorder) WaitDown(ctx context.Context, peer transport.Proc) (Down, error) {
	var out Down
	err := r.Wait(ctx, func(_ []Frame, downs []Down) bool {
		for _, d := range downs {
			if d.Peer == peer {
				out = d
				return true
			}
		}
		return false
	})
	if err != nil {
		return out, fmt.Errorf("transporttest: no PeerDown(%d): %w", peer, err)
	}
	return out, nil
}

func (r *Recorder) changedLocked() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}
