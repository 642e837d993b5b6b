package route_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/route"
	"github.com/gaspigo/gaspigo/transport/shm"
	"github.com/gaspigo/gaspigo/transport/tcp"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// cluster builds n routers over shm and tcp. host[i] is proc i's host
// label; procs with the same label are near. shmAddr, when set, replaces
// the shared-memory address proc i's peers are given for it.
func cluster(t *testing.T, host []string, shmAddr func(i int, real string) string) []*route.Router {
	t.Helper()
	return clusterWith(t, auth.NewToken(), host, shmAddr)
}

// clusterWith is cluster with the job token given.
func clusterWith(t *testing.T, token []byte, host []string, shmAddr func(i int, real string) string) []*route.Router {
	t.Helper()
	n := len(host)
	shms := make([]*shm.Transport, n)
	tcps := make([]*tcp.Transport, n)
	shmAddrs := map[transport.Proc]string{}
	tcpAddrs := map[transport.Proc]string{}
	for i := range n {
		sc := shm.DefaultConfig()
		sc.Self, sc.Token, sc.RingSize = transport.Proc(i), token, shm.MinRingSize
		s, err := shm.New(sc)
		if err != nil {
			t.Fatal(err)
		}
		tc := tcp.LocalConfig()
		tc.Self, tc.Token = transport.Proc(i), token
		c, err := tcp.New(tc)
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		shms[i], tcps[i] = s, c
		a := s.Addr()
		if shmAddr != nil {
			a = shmAddr(i, a)
		}
		shmAddrs[transport.Proc(i)], tcpAddrs[transport.Proc(i)] = a, c.Addr()
	}
	rs := make([]*route.Router, n)
	for i := range n {
		var near []transport.Proc
		nearAddrs := map[transport.Proc]string{}
		for j := range n {
			if j != i && host[j] == host[i] {
				near = append(near, transport.Proc(j))
				nearAddrs[transport.Proc(j)] = shmAddrs[transport.Proc(j)]
			}
		}
		if err := shms[i].SetPeers(nearAddrs); err != nil {
			t.Fatal(err)
		}
		if err := tcps[i].SetPeers(tcpAddrs); err != nil {
			t.Fatal(err)
		}
		r, err := route.New(route.Config{Near: shms[i], Far: tcps[i], NearPeers: near})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rs[i] = r
	}
	return rs
}

// TestConformance: procs 0 and 1 share a host, 2 is on another; every
// case of the suite holds over the mix.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
		host := make([]string, n)
		for i := range host {
			host[i] = "a"
			if i >= 2 {
				host[i] = "b"
			}
		}
		out := []transport.Transport{}
		for _, r := range cluster(t, host, nil) {
			out = append(out, r)
		}
		return out
	})
}

// TestFallbackToFar: two procs labelled on one host whose shared-memory
// addresses cannot be reached (as from another network namespace): the
// frames go through TCP, in order, with no PeerDown, and the peer moves
// to Far.
func TestFallbackToFar(t *testing.T) {
	rs := cluster(t, []string{"a", "a"}, func(i int, real string) string { return "@gaspigo-shm-nobody-listens-here" })
	recs := []*transporttest.Recorder{transporttest.NewRecorder(), transporttest.NewRecorder()}
	for i, r := range rs {
		if err := r.Start(recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), transporttest.Timeout)
	defer cancel()
	if !rs[0].IsNear(1) {
		t.Fatal("proc 1 does not start near proc 0")
	}
	if rs[0].Connected(1) || rs[1].Connected(0) {
		t.Fatal("connected before any Send")
	}
	for seq := range uint64(20) {
		h := transport.Header{Type: transport.FramePassive, Seq: seq}
		if err := rs[0].Send(ctx, 1, &h, []byte("over tcp")); err != nil {
			t.Fatalf("Send %d: %v", seq, err)
		}
	}
	frames, err := recs[1].WaitFrames(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if f.Header.Seq != uint64(i) {
			t.Fatalf("frame %d has Seq %d", i, f.Header.Seq)
		}
	}
	if rs[0].IsNear(1) {
		t.Error("proc 1 is still routed near after its shared-memory path failed")
	}
	if !rs[0].Connected(1) || !rs[1].Connected(0) {
		t.Error("not connected (through Far) after the frames went")
	}
	if d := recs[0].Downs(); len(d) != 0 {
		t.Errorf("PeerDown after a fallback: %v", d)
	}
}

// TestValidate: bad configurations are refused with ErrConfig.
func TestValidate(t *testing.T) {
	token := auth.NewToken()
	sc := shm.DefaultConfig()
	sc.Self, sc.Token = 0, token
	s, err := shm.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tc := tcp.LocalConfig()
	tc.Self, tc.Token = 1, token
	c, err := tcp.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, cfg := range map[string]route.Config{
		"missing Far":   {Near: s},
		"different ids": {Near: s, Far: c},
	} {
		if _, err := route.New(cfg); !errors.Is(err, route.ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

// farOnly hides every capability of a transport but the Transport
// interface itself: a far transport that cannot learn peers.
type farOnly struct{ transport.Transport }

// TestAddPeer: a process that joined the job is added to Far and is
// never near: frames both ways go over TCP. A near peer, or a Far that
// cannot learn peers, is refused with ErrPeers.
func TestAddPeer(t *testing.T) {
	token := auth.NewToken()
	rs := clusterWith(t, token, []string{"a", "a"}, nil)
	recs := []*transporttest.Recorder{transporttest.NewRecorder(), transporttest.NewRecorder()}
	for i, r := range rs {
		if err := r.Start(recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	far0 := rs[0].Far().(*tcp.Transport)
	if err := rs[0].AddPeer(1, far0.Addr()); !errors.Is(err, route.ErrPeers) {
		t.Errorf("AddPeer of a near peer = %v, want ErrPeers", err)
	}
	tc := tcp.LocalConfig()
	tc.Self, tc.Token = 2, token
	joiner, err := tcp.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { joiner.Close() })
	if err := joiner.SetPeers(map[transport.Proc]string{0: far0.Addr()}); err != nil {
		t.Fatal(err)
	}
	rj := transporttest.NewRecorder()
	if err := joiner.Start(rj); err != nil {
		t.Fatal(err)
	}
	if err := rs[0].AddPeer(2, joiner.Addr()); err != nil {
		t.Fatalf("AddPeer of the joiner: %v", err)
	}
	if rs[0].IsNear(2) {
		t.Error("the joiner is routed near")
	}
	if err := rs[0].AddPeer(2, far0.Addr()); !errors.Is(err, tcp.ErrPeers) {
		t.Errorf("AddPeer of the joiner at another address = %v, want tcp.ErrPeers", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), transporttest.Timeout)
	defer cancel()
	h := transport.Header{Type: transport.FramePassive, Seq: 1}
	if err := rs[0].Send(ctx, 2, &h, []byte("to the joiner")); err != nil {
		t.Fatal(err)
	}
	h = transport.Header{Type: transport.FramePassive, Seq: 2}
	if err := joiner.Send(ctx, 0, &h, []byte("from the joiner")); err != nil {
		t.Fatal(err)
	}
	if _, err := rj.WaitFrames(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := recs[0].WaitFrames(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A batched frame is counted out once its writer's write returned,
	// which may be after the joiner read it.
	deadline := time.Now().Add(transporttest.Timeout)
	for st := far0.Stats(); st.FramesOut != 1 || st.FramesIn != 1; st = far0.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("TCP carried %d frames out and %d in, want 1 and 1", st.FramesOut, st.FramesIn)
		}
		time.Sleep(time.Millisecond) // real sockets: poll with a deadline
	}

	r, err := route.New(route.Config{Near: rs[1].Near(), Far: farOnly{rs[1].Far()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddPeer(2, joiner.Addr()); !errors.Is(err, route.ErrPeers) {
		t.Errorf("AddPeer through a Far that cannot learn peers = %v, want ErrPeers", err)
	}
}
