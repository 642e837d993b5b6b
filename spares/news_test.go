package spares

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/spares/internal/follow"
)

// A child that applies, in order, the changes its parent kept reaches the
// parent's state and version; one older than the changes kept gets the
// whole state; news that does not fit is refused and the state kept.
func TestNewsReachesTheSameState(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	initial := mustState(t, 4, 3, 2, false)
	parent, child := newFSM(initial.Clone(), log), newFSM(initial.Clone(), log)
	cmds := []command{
		declareFailed{Proc: 1, Reporter: noProc, Epoch: 1},
		setVoters{Voters: []uint32{0, 2}},
		declareFailed{Proc: 0, Reporter: noProc, Epoch: 2},
		addSpare{Proc: 900, Info: procInfo{Host: "y"}},
	}
	for i, c := range cmds {
		parent.Apply(logOf(t, uint64(10+3*i), c))
	}
	u, _, err := parent.newsFor(0, false)
	if err != nil || u.State != nil || len(u.Entries) != len(cmds) || u.Version != 19 {
		t.Fatalf("news since 0: version %d, %d entries, state %v, %v", u.Version, len(u.Entries), u.State != nil, err)
	}
	if err := child.applyUpdate(u); err != nil {
		t.Fatal(err)
	}
	want, _ := parent.view()
	got, _ := child.view()
	if !reflect.DeepEqual(normState(got), normState(want)) || child.version() != parent.version() {
		t.Fatalf("child %s (v%d), parent %s (v%d)", summarize(&got), child.version(), summarize(&want), parent.version())
	}
	// Nothing newer: an empty answer, and applying it changes nothing.
	if u, _, _ := parent.newsFor(19, false); u.Version != 19 || u.Entries != nil || u.State != nil {
		t.Fatalf("news since the latest: %+v", u)
	}
	// Entries the child holds already are skipped (a second parent, or Raft, got there first).
	part, _, _ := parent.newsFor(13, false)
	if len(part.Entries) != 2 || part.Entries[0].Index != 16 {
		t.Fatalf("news since 13: %+v", part.Entries)
	}
	if err := child.applyUpdate(part); err != nil || child.version() != 19 {
		t.Fatalf("re-applied news: %v, version %d", err, child.version())
	}
	// Older than the changes kept: the whole state.
	for i := 0; i < maxNews+5; i++ {
		parent.Apply(logOf(t, uint64(100+i), addSpare{Proc: uint32(1000 + i), Info: procInfo{Host: "x"}}))
	}
	full, _, err := parent.newsFor(19, false)
	if err != nil || full.State == nil || full.Entries != nil {
		t.Fatalf("news for a child behind the changes kept: %d entries, state %v, %v", len(full.Entries), full.State != nil, err)
	}
	if err := child.applyUpdate(full); err != nil {
		t.Fatal(err)
	}
	want, _ = parent.view()
	got, _ = child.view()
	if !reflect.DeepEqual(normState(got), normState(want)) || child.version() != parent.version() {
		t.Fatalf("after the whole state: child v%d, parent v%d", child.version(), parent.version())
	}
	// A change that does not apply here is refused (the caller then asks for the whole state).
	bad := update{Version: 10_000, Entries: []follow.Entry{{Index: 9_999, Data: mustEncode(t, declareFailed{Proc: 77, Reporter: noProc, Epoch: 1})}}}
	before := child.version()
	if err := child.applyUpdate(bad); !errors.Is(err, errUnknownProc) && !errors.Is(err, errBadCommand) {
		t.Fatalf("news that does not apply: %v", err)
	}
	if child.version() != before {
		t.Fatalf("refused news moved the version from %d to %d", before, child.version())
	}
}

// Raft replaying entries that a promoted client got from the tree skips
// them, and hands a proposer the result the change had.
func TestFSMSkipsEntriesHeldFromTheTree(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	initial := mustState(t, 4, 2, 2, false)
	parent, child := newFSM(initial.Clone(), log), newFSM(initial.Clone(), log)
	first := parent.Apply(logOf(t, 5, declareFailed{Proc: 1, Reporter: noProc, Epoch: 1})).(applyResponse)
	u, _, _ := parent.newsFor(0, false)
	if err := child.applyUpdate(u); err != nil {
		t.Fatal(err)
	}
	again := child.Apply(logOf(t, 5, declareFailed{Proc: 1, Reporter: noProc, Epoch: 1})).(applyResponse)
	if !reflect.DeepEqual(again, first) {
		t.Fatalf("replayed entry: %+v, want the original %+v", again, first)
	}
	st, _ := child.view()
	if st.Epoch != 2 || child.version() != 5 {
		t.Fatalf("replayed entry applied twice: epoch %d version %d", st.Epoch, child.version())
	}
	// A snapshot older than the state held is not restored over it.
	snap, _ := parent.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	child.Apply(logOf(t, 8, declareFailed{Proc: 0, Reporter: noProc, Epoch: 2}))
	if err := child.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	if st, _ := child.view(); st.Epoch != 3 || child.version() != 8 {
		t.Fatalf("an older snapshot went back to epoch %d, version %d", st.Epoch, child.version())
	}
	// A newer one is, with its version.
	fresh := newFSM(initial.Clone(), log)
	if err := fresh.Restore(sink.reader()); err != nil || fresh.version() != 5 {
		t.Fatalf("restore into a fresh fsm: version %d, %v", fresh.version(), err)
	}
}

func TestFollowCodec(t *testing.T) {
	payload, err := follow.EncodeRequest(42, true)
	if err != nil {
		t.Fatal(err)
	}
	req, err := treeSide{}.Request(payload)
	if err != nil {
		t.Fatal(err)
	}
	op, payload, err := decodeCtlRequest(req)
	if err != nil || op != ctlOpFollow {
		t.Fatalf("follow request: op %d, %v", op, err)
	}
	if have, full, err := follow.DecodeRequest(payload); have != 42 || !full || err != nil {
		t.Fatalf("follow request: %d %v %v", have, full, err)
	}
	a := follow.Answer{Code: codeOK, Leader: 3, Fresh: true, Age: 1500000, Update: update{Version: 9,
		Entries: []follow.Entry{{Index: 7, Data: mustEncode(t, finish{})}, {Index: 9, Data: mustEncode(t, finish{})}}}}
	b, err := follow.EncodeAnswer(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := follow.DecodeAnswer(b, followLimits)
	if err != nil || got.Leader != 3 || !got.Fresh || got.Age != a.Age || got.Update.Version != 9 || len(got.Update.Entries) != 2 || got.Update.State != nil {
		t.Fatalf("follow answer: %+v, %v", got, err)
	}
	// Entries out of order, or beyond the version, are refused.
	a.Update.Entries[0].Index = 9
	b, _ = follow.EncodeAnswer(a)
	if _, err := follow.DecodeAnswer(b, followLimits); !errors.Is(err, errProtocol) {
		t.Fatalf("entries out of order: %v", err)
	}
	a.Update.Entries = a.Update.Entries[:1]
	a.Update.Version = 3
	b, _ = follow.EncodeAnswer(a)
	if _, err := follow.DecodeAnswer(b, followLimits); !errors.Is(err, errProtocol) {
		t.Fatalf("entry beyond the version: %v", err)
	}
	for cut := range len(b) {
		if _, err := follow.DecodeAnswer(b[:cut], followLimits); err == nil {
			t.Fatalf("truncated answer (%d of %d bytes) decoded", cut, len(b))
		}
	}
	if got := slices.Clone(b); len(got) == 0 {
		t.Fatal("empty encoding")
	}
}

func mustEncode(t *testing.T, c command) []byte {
	t.Helper()
	b, err := encodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }
func (s *memSink) reader() io.ReadCloser {
	return io.NopCloser(bytes.NewReader(s.Bytes()))
}
