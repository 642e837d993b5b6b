package pgas_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// overTCP returns a Config change that gives process i of n the i-th of
// n TCP transports on loopback, which know each other, with their readers
// polling their sockets for spin.
func overTCP(t *testing.T, n int, spin time.Duration) func(*pgas.Config) {
	t.Helper()
	token := auth.NewToken()
	trs := make([]*tcp.Transport, n)
	addrs := map[transport.Proc]string{}
	for i := range trs {
		cfg := tcp.LocalConfig()
		cfg.Self, cfg.Token, cfg.PollSpin = transport.Proc(i), token, spin
		tr, err := tcp.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[i], addrs[transport.Proc(i)] = tr, tr.Addr()
	}
	for _, tr := range trs {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
	}
	return func(c *pgas.Config) { c.Transport = trs[c.Proc] }
}

// The fence holds over TCP while the bad writer runs, as it does in
// memory (TestDirectFenceHoldsAgainstConcurrentOlderEpochWriter): the
// writer's frames leave from its own goroutine when the connection is
// idle (transport/tcp's writeNow) and land in readers that poll their
// sockets, concurrently with the owner applying the view and recovering,
// round after round. Every frame is judged where it lands (the epoch it
// carries against the owner's view), whoever wrote it.
func TestFrameFenceHoldsAgainstConcurrentOlderEpochWriterTCP(t *testing.T) {
	rounds := 5000
	if raceOn || testing.Short() {
		rounds = 300
	}
	rts, _, _, fm, handles := newFTJobOn(t, 2, 0, nil, overTCP(t, 2, 50*time.Microsecond))
	olderEpochWriterRounds(t, rts, fm, handles, rounds, func(writer *pgas.Runtime) string {
		seg0, _ := rts[0].Segment(1)
		switch {
		case writer.Stats().DirectNotes != 0:
			return "the writer wrote in memory, not over TCP"
		case binary.LittleEndian.Uint64(seg0.Bytes()[64:]) == 0:
			return "none of the writer's frames landed before the view"
		}
		return ""
	})
}

// As TestFrameFenceHoldsAgainstConcurrentOlderEpochWriterTCP, with a
// writer whose every call is cancelled after a random 0-100 us: a frame
// whose Send ended with the context still leaves (whole, in the
// background, or from the connection's batch), so it may land while the
// view changes, and the fence must judge it as any other.
func TestFrameFenceHoldsAgainstCancelledOlderEpochWriterTCP(t *testing.T) {
	rounds := 3000
	if raceOn || testing.Short() {
		rounds = 200
	}
	rts, _, _, fm, handles := newFTJobOn(t, 2, 0, nil, overTCP(t, 2, 50*time.Microsecond))
	newCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Duration(rand.IntN(100))*time.Microsecond)
	}
	olderEpochWriterRoundsCtx(t, rts, fm, handles, rounds, func(writer *pgas.Runtime) string {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if seg0, _ := rts[0].Segment(1); binary.LittleEndian.Uint64(seg0.Bytes()[64:]) != 0 {
				return ""
			}
		}
		return "none of the cancelled writer's frames landed before the view"
	}, newCtx)
}
