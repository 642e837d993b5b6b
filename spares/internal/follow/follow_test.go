package follow

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/tree"
	"github.com/gaspigo/gaspigo/spares/internal/wire"
)

var lim = Limits{State: 1 << 10, Command: 64, Entries: 4}

func TestCodec(t *testing.T) {
	p, err := EncodeRequest(42, true)
	if err != nil {
		t.Fatal(err)
	}
	if have, full, err := DecodeRequest(p); have != 42 || !full || err != nil {
		t.Fatalf("request: %d %v %v", have, full, err)
	}
	a := Answer{Code: wire.CodeOK, Leader: 3, Fresh: true, Age: 1500 * time.Millisecond,
		Update: Update{Version: 9, Entries: []Entry{{Index: 7, Data: []byte{1}}, {Index: 9, Data: []byte{2}}}}}
	b, err := EncodeAnswer(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeAnswer(b, lim)
	if err != nil || got.Leader != 3 || !got.Fresh || got.Age != a.Age || got.Update.Version != 9 || len(got.Update.Entries) != 2 || got.Update.State != nil {
		t.Fatalf("answer: %+v, %v", got, err)
	}
	// Entries out of order, or beyond the version, are refused.
	a.Update.Entries[0].Index = 9
	b, _ = EncodeAnswer(a)
	if _, err := DecodeAnswer(b, lim); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("entries out of order: %v", err)
	}
	a.Update.Entries = a.Update.Entries[:1]
	a.Update.Version = 3
	b, _ = EncodeAnswer(a)
	if _, err := DecodeAnswer(b, lim); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("entry beyond the version: %v", err)
	}
	// More entries than kept, or a larger state, are refused.
	a = Answer{Code: wire.CodeOK, Update: Update{Version: 9, State: make([]byte, lim.State+1)}}
	b, _ = EncodeAnswer(a)
	if _, err := DecodeAnswer(b, lim); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("state above the limit: %v", err)
	}
}

// pipeConn is one end of a net.Pipe, with the peer's id.
type pipeConn struct {
	net.Conn
	peer uint32
}

func (c pipeConn) Peer() uint32 { return c.peer }

// member is a Member over a version that counts the changes applied, and
// a parent (serve) that every Dial reaches.
type member struct {
	mu      sync.Mutex
	version uint64
	changed chan struct{}
	serve   *Proc // the parent Dial reaches; nil: none
	until   uint64
}

func newMember(version uint64) *member {
	return &member{version: version, changed: make(chan struct{})}
}

func (m *member) set(v uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.version = v
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *member) Version() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

func (m *member) Following() bool  { return m.Version() < m.until }
func (m *member) MaybeStartRaft()  {}
func (m *member) StartsRaft() bool { return false }

func (m *member) Upstream() ([]uint32, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []uint32{1}, m.changed
}

func (m *member) SkipDown(map[uint32]time.Time, time.Time) {}
func (m *member) OnDown(uint32, func()) func()             { return func() {} }

func (m *member) Dial(_ context.Context, proc uint32) (Conn, error) {
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		c := pipeConn{b, 2}
		body, err := wire.ReadFrame(c, 1<<10)
		if err != nil {
			return
		}
		m.serve.Serve(c, body)
	}()
	return pipeConn{a, proc}, nil
}

func (m *member) Request(payload []byte) ([]byte, error) { return payload, nil }
func (m *member) Next(c Conn) ([]byte, error)            { return wire.ReadFrame(c, 1<<10) }

func (m *member) Apply(u Update) error {
	if len(u.Entries) == 0 && u.State == nil {
		return nil
	}
	m.set(u.Version)
	return nil
}

func (m *member) News(have uint64, full bool) (Update, <-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := Update{Version: m.version}
	if u.Version > have {
		u.State = []byte{1}
	}
	return u, m.changed, nil
}

func (m *member) Leader() (uint32, bool)              { return 1, true }
func (m *member) ContactTime(now time.Time) time.Time { return now }
func (m *member) InContact(time.Time) bool            { return true }
func (m *member) CodeOf(err error) string             { return "internal" }

// A child follows its parent until it has the parent's version, also when
// the parent's version moves while the child waits on a held request.
func TestFollowServe(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan struct{})
	defer close(closed)
	cfg := func(h *tree.Heard) Config {
		return Config{Hold: 50 * time.Millisecond, RPCTimeout: time.Second, Fresh: time.Second, Limits: lim, Log: log, Heard: h, Ctx: ctx, Closed: closed}
	}
	parent := newMember(3)
	var ph, ch tree.Heard
	pp := New(cfg(&ph), parent)
	child := newMember(0)
	child.until, child.serve = 5, pp
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(cfg(&ch), child).Follow()
	}()
	deadline := time.After(10 * time.Second)
	for child.Version() != 3 {
		select {
		case <-deadline:
			t.Fatalf("child at version %d, want 3", child.Version())
		case <-time.After(time.Millisecond):
		}
	}
	parent.set(5)
	select {
	case <-done:
	case <-deadline:
		t.Fatalf("child at version %d, want 5", child.Version())
	}
	if l, ok := ch.Leader(); !ok || l != 1 {
		t.Fatalf("child heard leader %d %v, want 1", l, ok)
	}
	if pp.Served() < 2 {
		t.Fatalf("parent served %d answers, want 2 or more", pp.Served())
	}
}
