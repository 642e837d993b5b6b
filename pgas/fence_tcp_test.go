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
	"github.com/gaspigo/gaspigo/transport/shm"
	"github.com/gaspigo/gaspigo/transport/tcp"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// overTCP returns a Config change that gives process i of n the i-th of
// n TCP transports on loopback, which know each other, with their readers
// polling their sockets for spin.
func overTCP(t *testing.T, n int, spin time.Duration) func(*pgas.Config) {
	t.Helper()
	token := auth.NewToken()
	return over(t, n, func(self transport.Proc) (*tcp.Transport, error) {
		cfg := tcp.LocalConfig()
		cfg.Self, cfg.Token, cfg.PollSpin = self, token, spin
		return tcp.New(cfg)
	})
}

// overShm is overTCP with shared-memory rings: every frame goes through a
// ring and its reader (segments are not shared: no DirectShm).
func overShm(t *testing.T, n int) func(*pgas.Config) {
	t.Helper()
	token := auth.NewToken()
	return over(t, n, func(self transport.Proc) (*shm.Transport, error) {
		cfg := shm.DefaultConfig()
		cfg.Self, cfg.Token = self, token
		return shm.New(cfg)
	})
}

// over gives process i of n the i-th of n transports made by newT, which
// know each other.
func over[T transporttest.Addressed](t *testing.T, n int, newT func(transport.Proc) (T, error)) func(*pgas.Config) {
	trs := transporttest.NewCluster(t, n, newT)
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

// The same through shared-memory rings: the frames land in the ring's
// reader (which lends the handler one header for all of them) while the
// owner applies the view and recovers.
func TestFrameFenceHoldsAgainstConcurrentOlderEpochWriterShm(t *testing.T) {
	rounds := 5000
	if raceOn || testing.Short() {
		rounds = 300
	}
	rts, _, _, fm, handles := newFTJobOn(t, 2, 0, nil, overShm(t, 2))
	olderEpochWriterRounds(t, rts, fm, handles, rounds, func(writer *pgas.Runtime) string {
		seg0, _ := rts[0].Segment(1)
		switch {
		case writer.Stats().DirectNotes != 0 || writer.Stats().DirectWrites != 0:
			return "the writer wrote in memory, not through a ring"
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
