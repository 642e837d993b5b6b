package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Timeout bounds every wait in the suite: long enough for TCP on a busy
// 2-core machine, and free inside a synctest bubble.
const Timeout = 10 * time.Second

// Factory returns n transports for procs 0..n-1 (transport i has Self() ==
// i) that can reach each other and are not started yet. It registers their
// cleanup with t.Cleanup; the suite may Close some of them itself first, so
// Close must be idempotent.
type Factory func(t *testing.T, n int) []transport.Transport

// Case is one conformance check.
type Case struct {
	Name string
	Test func(t *testing.T, f Factory)
}

// Cases returns the conformance checks, in the order Run runs them.
func Cases() []Case {
	return []Case{
		{"Self", testSelf},
		{"HeaderFields", testHeaderFields},
		{"PayloadReuse", testPayloadReuse},
		{"ReadIntoCallerBuffer", testReadInto},
		{"FIFOConcurrentSenders", testFIFO},
		{"FirstSendsCross", testFirstSendsCross},
		{"HandlerErrorKeepsConnection", testHandlerError},
		{"TooLarge", testTooLarge},
		{"UnknownPeer", testUnknownPeer},
		{"CanceledContext", testCanceledContext},
		{"BlockedReceiverHonoursContext", testBlockedReceiver},
		{"SendAfterClose", testSendAfterClose},
		{"CloseNotifiesPeers", testCloseNotifiesPeers},
		{"CloseUnderLoad", testCloseUnderLoad},
	}
}

// Run runs every Case as a subtest of t.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) { c.Test(t, f) })
	}
}

// --- helpers ---

func newTransports(t *testing.T, f Factory, n int) []transport.Transport {
	t.Helper()
	ts := f(t, n)
	if len(ts) != n {
		t.Fatalf("factory returned %d transports, want %d", len(ts), n)
	}
	for i, tr := range ts {
		if tr == nil {
			t.Fatalf("factory returned a nil transport at index %d", i)
		}
	}
	return ts
}

// startAll starts n transports of f with a new Recorder each.
func startAll(t *testing.T, f Factory, n int) ([]transport.Transport, []*Recorder) {
	t.Helper()
	ts := newTransports(t, f, n)
	return ts, StartAll(t, ts)
}

func timeoutCtx(t *testing.T) context.Context { return Context(t, Timeout) }

// pattern is the source of all payload bytes: payloads are windows of it at
// an offset derived from (sender, seq), so that receivers can check them
// without storing what was sent.
var pattern = func() []byte {
	b := make([]byte, 1<<20+256)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}()

func payloadFor(src transport.Proc, seq uint64, size int) []byte {
	off := int((seq*31 + uint64(src)*17) % 251)
	return pattern[off : off+size]
}

func noDowns(t *testing.T, recs []*Recorder) {
	t.Helper()
	for i, r := range recs {
		for _, d := range r.Downs() {
			t.Errorf("proc %d got unexpected PeerDown(%d): %v", i, d.Peer, d.Err)
		}
	}
}
