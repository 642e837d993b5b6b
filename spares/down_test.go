package spares

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// silentUpstreams starts the job's layout of test/mhtier (4 ranks and 2
// spares on 3 hosts) in the simulation, finds a client whose first two
// upstream processes are ranks, waits until it follows, and silences
// those two (memnet.Network.Silence: dials to them take the whole
// RPCTimeout, their connections go quiet), as a host cut off silently
// with ranks 0 and 1 did in issue 31. It returns the client, the two
// silenced processes and a live voter.
func silentUpstreams(t *testing.T, s *sim) (client uint32, gone []uint32, voter uint32) {
	t.Helper()
	st := s.leader().view()
	tr := newTree(&st, s.nodes[0].cfg.TreeFanout)
	client = noProc
	for p := range s.nodes {
		up := tr.Upstream(uint32(p))
		if tr.Parent(uint32(p)) != noProc && len(up) >= 3 && slices.Contains(st.Ranks.slice(), up[0]) && slices.Contains(st.Ranks.slice(), up[1]) {
			client, gone, voter = uint32(p), up[:2], up[2]
			break
		}
	}
	if client == noProc {
		t.Fatalf("no client whose first two upstream processes are ranks: voters %v", st.Voters)
	}
	for !s.nodes[client].inContact(time.Now()) {
		time.Sleep(10 * time.Millisecond) // fake time: until the tree's first fresh news
	}
	for _, p := range gone {
		s.net.Silence(p)
	}
	t.Logf("client %d, its first upstream processes %v silenced; voter %d reports", client, gone, voter)
	return client, gone, voter
}

// reportAll declares every process of gone failed through reporter, all
// at once (as the runtime reports each confirmed failure on a goroutine
// of its own), and returns the epoch that declared the last one.
func reportAll(ctx context.Context, t *testing.T, s *sim, reporter uint32, gone []uint32) uint64 {
	t.Helper()
	n := s.nodes[reporter]
	view := n.view().Epoch
	type answer struct {
		res result
		err error
	}
	ch := make(chan answer, len(gone))
	for _, p := range gone {
		go func() {
			res, err := n.reportFailure(ctx, p, reporter, view)
			ch <- answer{res, err}
		}()
	}
	var epoch uint64
	for range gone {
		a := <-ch
		if a.err != nil {
			t.Fatalf("proc %d reports: %v", reporter, a.err)
		}
		epoch = max(epoch, a.res.Epoch)
	}
	return epoch
}

// A client whose first two upstream processes went silent for good
// reaches the live voters after them, whoever confirmed the failures.
// Each failed attempt on a silent process takes a whole dial time-out
// (RPCTimeout), longer than the mark that skips a process that failed
// (2 TreeHold): the client used to try the two in turn for ever, and
// learnt nothing (issue 31: 54 s, until the kernel's neighbour entry
// for the silent host expired).
func TestSimSilentUpstreamsAreSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 6, 2, 3, nil)
		defer s.shutdownAll()
		client, gone, voter := silentUpstreams(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // fake time
		defer cancel()
		epoch := reportAll(ctx, t, s, voter, gone)
		at := time.Now()
		if _, err := s.nodes[client].waitEpoch(ctx, epoch); err != nil {
			t.Fatalf("client %d never learnt epoch %d: %v", client, epoch, err)
		}
		cfg := &s.nodes[0].cfg
		// A held request to the first and a dial to the second, each
		// to its deadline, then a live voter.
		bound := cfg.treeHold() + 2*cfg.RPCTimeout + time.Second
		if d := time.Since(at); d > bound {
			t.Fatalf("client %d learnt epoch %d %v after it was committed, want within %v", client, epoch, d, bound)
		}
		t.Logf("client %d learnt epoch %d %v after it was committed", client, epoch, time.Since(at))
	})
}

// When the client's own failure detector confirms the silent processes
// failed (reportFailure from the client), it drops the one it follows at
// once and asks a live voter, and its proposal goes around the leader it
// knew if that is one of them: it learns the epoch well within one dial
// time-out of its report.
func TestSimConfirmedUpstreamsAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 6, 2, 3, nil)
		defer s.shutdownAll()
		client, gone, _ := silentUpstreams(t, s)
		time.Sleep(s.nodes[0].cfg.HeartbeatTimeout)                           // the others elect a leader if it was silenced
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // fake time
		defer cancel()
		at := time.Now()
		epoch := reportAll(ctx, t, s, client, gone)
		if _, err := s.nodes[client].waitEpoch(ctx, epoch); err != nil {
			t.Fatalf("client %d never learnt epoch %d: %v", client, epoch, err)
		}
		bound := s.nodes[0].cfg.RPCTimeout / 2
		if d := time.Since(at); d > bound {
			t.Fatalf("client %d learnt epoch %d %v after its reports, want within %v", client, epoch, d, bound)
		}
		st := s.nodes[client].view()
		for _, p := range gone {
			if _, failed := st.Failed[p]; !failed {
				t.Fatalf("proc %d not failed in epoch %d: %s", p, st.Epoch, summarize(&st))
			}
		}
		t.Logf("client %d learnt epoch %d %v after its reports", client, epoch, time.Since(at))
	})
}

func TestDownMarks(t *testing.T) {
	var m downMarks
	now := time.Unix(1000, 0)
	if m.is(3, now) {
		t.Fatal("an empty set marks 3")
	}
	fired := 0
	stop := m.onMark(3, func() { fired++ })
	m.mark(4, now, time.Second)
	if fired != 0 {
		t.Fatal("a mark of 4 fired the watcher of 3")
	}
	m.mark(3, now, time.Second)
	m.mark(3, now, time.Second)
	stop()
	if fired != 1 {
		t.Fatalf("the watcher of 3 fired %d times, want once", fired)
	}
	if !m.is(3, now.Add(999*time.Millisecond)) || m.is(3, now.Add(time.Second)) {
		t.Fatal("a mark of 1s does not last exactly 1s")
	}
	bad := map[uint32]time.Time{4: now.Add(5 * time.Second)}
	m.mark(5, now, 2*time.Second)
	m.addTo(bad, now)
	if want := now.Add(5 * time.Second); !bad[4].Equal(want) {
		t.Fatalf("addTo shortened a longer mark of 4 to %v", bad[4])
	}
	if want := now.Add(2 * time.Second); !bad[5].Equal(want) {
		t.Fatalf("addTo: mark of 5 is %v, want %v", bad[5], want)
	}
	// A watcher of a process already down fires at once.
	m.mark(6, time.Now(), time.Minute)
	fired = 0
	m.onMark(6, func() { fired++ })()
	if fired != 1 {
		t.Fatal("the watcher of a process already down did not fire")
	}
}
