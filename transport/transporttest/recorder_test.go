package transporttest

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

func TestRecorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRecorder()
		reject := errors.New("no")
		r.Reject = func(_ transport.Proc, h *transport.Header) error {
			if h.Seq == 1 {
				return reject
			}
			return nil
		}
		go func() {
			time.Sleep(time.Second)
			_ = r.HandleFrame(3, &transport.Header{Len: 2, Seq: 0}, transport.BytesPayload("hi"))
			if err := r.HandleFrame(3, &transport.Header{Len: 0, Seq: 1}, transport.BytesPayload(nil)); !errors.Is(err, reject) {
				t.Errorf("Reject not applied: %v", err)
			}
			if err := r.HandleFrame(4, &transport.Header{Len: 5, Seq: 2}, transport.BytesPayload("abc")); err == nil {
				t.Error("length mismatch not reported")
			}
			r.PeerDown(4, transport.ErrPeerDown)
		}()
		got, err := r.WaitFrames(t.Context(), 3)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[0].Payload) != "hi" || got[2].Header.Len != 5 || len(got[2].Payload) != 3 {
			t.Errorf("frames recorded wrongly: %+v", got)
		}
		if n := len(r.FramesFrom(3)); n != 2 {
			t.Errorf("FramesFrom(3) = %d frames, want 2", n)
		}
		d, err := r.WaitDown(t.Context(), 4)
		if err != nil || !errors.Is(d.Err, transport.ErrPeerDown) {
			t.Errorf("WaitDown(4) = %+v, %v", d, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := r.WaitDown(ctx, 9); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitDown for a peer that never went down: %v, want DeadlineExceeded", err)
		}
	})
}
