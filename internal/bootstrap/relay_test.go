package bootstrap

import (
	"bytes"
	"encoding/binary"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// fakeRelay is a process of the relay tree that misbehaves: it registers
// with a relay address and serves askers as how says.
type fakeRelay struct {
	ln     net.Listener
	notice chan *relayNotice // its own notice, from the rendezvous
}

// Relay misbehaviours.
const (
	relaySilent = "silent" // accepts and never answers: a stopped process
	relayWrong  = "wrong"  // proves the token and sends other bytes than the table
	relayGone   = "gone"   // its port is closed: a dead process
)

// startFakeRelay registers process proc with a relay that behaves as how.
func startFakeRelay(t *testing.T, j *testJob, proc uint32, how string) *fakeRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRelay{ln: ln, notice: make(chan *relayNotice, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	addr := ln.Addr().String()
	if how == relayGone {
		ln.Close()
	} else {
		wg.Go(func() { f.serve(t, j, proc, how) })
	}
	c, err := net.DialTimeout("tcp", j.env.Rendezvous, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rw, _, err := auth.Dial(c, j.env.Token, auth.PurposeRendezvous, proc, j.env.TLS)
	if err != nil {
		t.Fatal(err)
	}
	env := j.envFor(proc)
	self := memberFor(proc)
	self.Host, self.Pid = env.Host, 1000+int(proc)
	h := &envelope{Kind: msgHello, Hello: &hello{Version: protoVersion, NumProcs: env.NumProcs, NumRanks: env.NumRanks, JobID: env.JobID, Member: self, Relay: addr}}
	if err := writeMsg(rw, h, MaxClientMessage); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for {
			m, err := readMsg(rw, MaxServerMessage)
			if err != nil {
				return
			}
			if m.Kind == msgRelay {
				f.notice <- m.Relay
			}
		}
	})
	return f
}

func (f *fakeRelay) serve(t *testing.T, j *testJob, proc uint32, how string) {
	var held []net.Conn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range held {
			c.Close()
		}
		wg.Wait()
	}()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		held = append(held, c)
		if how == relaySilent {
			continue
		}
		// Each asker at once, as a real relay serves them: one after the
		// other, the last would wait for the others' handshakes.
		wg.Go(func() { f.misserve(t, j, proc, c) })
	}
}

// misserve answers one asker with bytes that are not the table.
func (f *fakeRelay) misserve(t *testing.T, j *testJob, proc uint32, c net.Conn) {
	c.SetDeadline(time.Now().Add(testDeadline))
	rw, _, err := auth.Serve(c, j.env.Token, auth.PurposeTable, proc, auth.AcceptHooks{}, j.env.TLS)
	if err != nil {
		// A child that gave up on it first: the relay misbehaves
		// anyway, the children's outcome is what is checked.
		t.Logf("fake relay %d: handshake: %v", proc, err)
		return
	}
	var n *relayNotice
	select {
	case n = <-f.notice:
		f.notice <- n
	case <-time.After(testDeadline):
		t.Errorf("fake relay %d: no notice", proc)
		return
	}
	wrong := make([]byte, 4+n.Size)
	binary.BigEndian.PutUint32(wrong, uint32(n.Size))
	copy(wrong[4:], bytes.Repeat([]byte{0x91}, n.Size))
	rw.Write(wrong)
}

// Rule (doc.go, the table's way down): the table reaches every process
// past a relay that is stopped, dead, or sends other bytes than the
// rendezvous's table (refused by the notice's digest): the process asks
// the next ancestor, and the rendezvous only when none is left. The first
// process below the roots (a child of process 0) misbehaves; its children
// get the table from process 0, their grandparent, and the others are not
// affected.
func TestRelayPastABadParent(t *testing.T) {
	// The tree's rules on 14 processes (4 roots, 2 children each), not
	// 584: under the race detector on a busy machine, hundreds of
	// registrations in one test process starve the relays until their
	// children rightly ask the rendezvous, which is not what this is about.
	smallRelayTree(t, 4, 2)
	bad := uint32(relayRoots)
	n := relayRoots + relayFanout*int(bad) + relayFanout
	for _, how := range []string{relaySilent, relayWrong, relayGone} {
		t.Run(how, func(t *testing.T) {
			j := startServer(t, n, n)
			startFakeRelay(t, j, bad, how)
			// Short enough that a silent relay is passed quickly, long
			// enough that process 0, the good relay, answers in time on
			// a busy machine (300 ms did not: its children then asked
			// the rendezvous).
			fast := func(_ *Env, _ *Member, c *ClientConfig) { c.HandshakeTimeout = 2 * time.Second }
			chans := map[uint32]<-chan regResult{}
			for p := range uint32(n) {
				if p != bad {
					chans[p] = j.registerAsync(t, p, fast)
				}
			}
			var first Table
			for p, ch := range chans {
				r := recv(t, ch)
				if r.err != nil {
					t.Fatalf("process %d: %v", p, r.err)
				}
				if first.Members == nil {
					first = r.table
				} else if !reflect.DeepEqual(r.table, first) {
					t.Fatalf("process %d got another table", p)
				}
			}
			if st := j.srv.Stats(); st.Tables != uint64(relayRoots) || st.Asked != 0 {
				t.Errorf("the rendezvous wrote the whole table %d times (%d asked for), want %d and none asked for: the children of process %d should have got it from process 0",
					st.Tables, st.Asked, relayRoots, bad)
			}
		})
	}
}

// Rule (doc.go, the table's way down): a process none of whose relays
// gives the table asks the rendezvous for it, and gets it. Process 0 is
// stopped, and it is the only relay its children have.
func TestRelayNoneLeftAsksTheRendezvous(t *testing.T) {
	n := relayRoots + relayFanout
	j := startServer(t, n, n)
	startFakeRelay(t, j, 0, relaySilent)
	fast := func(_ *Env, _ *Member, c *ClientConfig) { c.HandshakeTimeout = 300 * time.Millisecond }
	var chans []<-chan regResult
	for p := uint32(1); p < uint32(n); p++ {
		chans = append(chans, j.registerAsync(t, p, fast))
	}
	for _, ch := range chans {
		if r := recv(t, ch); r.err != nil || r.table.NumProcs() != n {
			t.Fatalf("registration: %v, %d members", r.err, r.table.NumProcs())
		}
	}
	if st := j.srv.Stats(); st.Asked != uint64(relayFanout) || st.Tables != uint64(n) {
		t.Errorf("the rendezvous wrote the whole table %d times, %d of them asked for; want %d and %d (process 0's children asked)", st.Tables, st.Asked, n, relayFanout)
	}
}

// Rule (doc.go, the table's way down): once the table is complete, the
// rendezvous's loss does not keep it from anyone: the relays serve it.
// The rendezvous is closed the moment the table completes.
func TestRelayOutlivesTheRendezvous(t *testing.T) {
	n := relayRoots + 3*relayFanout
	j := startServer(t, n, n)
	j.deadline = manyDeadline
	go func() {
		<-j.srv.Complete()
		j.srv.Close()
	}()
	var chans []<-chan regResult
	for p := range uint32(n) {
		chans = append(chans, j.registerAsync(t, p))
	}
	for p, ch := range chans {
		if r := recv(t, ch); r.err != nil || r.table.NumProcs() != n {
			t.Fatalf("process %d: %v, %d members", p, r.err, r.table.NumProcs())
		}
	}
	if st := j.srv.Stats(); st.Tables != uint64(relayRoots) {
		t.Errorf("the rendezvous wrote the whole table %d times, want %d", st.Tables, relayRoots)
	}
}

// smallRelayTree gives the relay tree roots roots and fanout children per
// relay for the rest of the test.
func smallRelayTree(t *testing.T, roots, fanout int) {
	r, f := relayRoots, relayFanout
	relayRoots, relayFanout = roots, fanout
	t.Cleanup(func() { relayRoots, relayFanout = r, f })
}
