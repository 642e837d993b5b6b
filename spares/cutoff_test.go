package spares

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/netfault"
)

// faultyCluster is a cluster whose every node's connections (dialed and
// accepted, Raft and control) obey a netfault rules file, so a test can
// cut one node off the network and heal it.
type faultyCluster struct {
	*cluster
	dir string
}

func newFaultyCluster(t *testing.T, ranks, spares int, mut func(*Config)) *faultyCluster {
	t.Helper()
	dir := t.TempDir()
	fc := &faultyCluster{dir: dir}
	fc.cluster = newCluster(t, ranks, spares, ranks+spares, func(c *Config) {
		inj := netfault.New(dir, c.Proc, nil)
		t.Cleanup(inj.Close)
		c.WrapConn = inj.Wrap
		c.RaftListener, c.CtlListener = inj.Listener(c.RaftListener), inj.Listener(c.CtlListener)
		if mut != nil {
			mut(c)
		}
	})
	return fc
}

// setRules replaces the rules file (netfault re-reads it every 20ms).
func (fc *faultyCluster) setRules(t *testing.T, rules string) {
	t.Helper()
	tmp := filepath.Join(fc.dir, "rules.tmp")
	if err := os.WriteFile(tmp, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(fc.dir, netfault.RulesFile)); err != nil {
		t.Fatal(err)
	}
}

// partitionOne cuts a node other than the leader off the network and
// returns the leader and that node.
func (fc *faultyCluster) partitionOne(t *testing.T, ctx context.Context) (leader, victim *Node) {
	t.Helper()
	leader = fc.leader(ctx)
	victim = fc.other(leader.proc())
	fc.setRules(t, "proc="+itoa(victim.proc())+" partition\n")
	return leader, victim
}

// waitLost waits up to d for node n to give up and returns why.
func waitLost(t *testing.T, n *Node, d time.Duration) (error, time.Time) {
	t.Helper()
	select {
	case <-n.lost():
		return n.lostErr(), time.Now()
	case <-time.After(d):
		t.Fatalf("node %d did not give up within %v", n.proc(), d)
	}
	return nil, time.Time{}
}

// Rule (liveness): a process cut off from every other for good gives up
// with ErrCutOff after Config.CutOff, while the others, who keep their
// quorum, go on.
func TestNodeCutOffForGood(t *testing.T) {
	const cutOff = 3 * time.Second
	fc := newFaultyCluster(t, 3, 1, func(c *Config) { c.CutOff = cutOff })
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	_, victim := fc.partitionOne(t, ctx)
	at := time.Now()
	err, when := waitLost(t, victim, phase)
	var ce *cutOffError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCutOff) || ce.Proc != victim.proc() {
		t.Fatalf("node %d gave up with %v, want a *CutOffError", victim.proc(), err)
	}
	if d := when.Sub(at); d < cutOff || d > 3*cutOff+10*time.Second { // a starved host stretches the bound
		t.Fatalf("cut off %v after the partition, want about %v", d, cutOff)
	}
	t.Logf("cut off %v after the partition: %v", when.Sub(at).Round(time.Millisecond), err)
	if _, err := victim.waitEpoch(ctx, 99); !errors.Is(err, ErrCutOff) {
		t.Fatalf("WaitEpoch after the cut-off: %v, want ErrCutOff", err)
	}
	for _, n := range fc.live() {
		if n != victim && n.lostErr() != nil {
			t.Fatalf("node %d, on the majority side, gave up: %v", n.proc(), n.lostErr())
		}
	}
	// The majority still commits.
	if _, err := fc.other(victim.proc()).propose(ctx, finish{}); err != nil {
		t.Fatalf("the majority cannot commit: %v", err)
	}
}

// Rule (liveness): a process declared failed while it was cut off learns
// it from the first process it reaches once the network heals (it left the
// Raft configuration, so no log entry will tell it) and gives up fenced,
// long before the cut-off bound. The same for an idle spare dropped from
// the pool.
func TestNodeReplacedWhileCutOff(t *testing.T) {
	const cutOff = 30 * time.Second
	fc := newFaultyCluster(t, 3, 2, func(c *Config) { c.CutOff = cutOff })
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	leader := fc.leader(ctx)
	st := leader.view()
	rank := fc.rankHolder(st, leader.proc())
	spare := st.Spares[len(st.Spares)-1]
	if spare == leader.proc() {
		spare = st.Spares[0]
	}
	fc.setRules(t, "proc="+itoa(rank)+" partition\nproc="+itoa(spare)+" partition\n")
	for _, p := range []uint32{rank, spare} {
		if _, err := fc.other(rank, spare).reportFailure(ctx, p, leader.proc(), 0); err != nil {
			t.Fatalf("declare %d failed: %v", p, err)
		}
	}
	// The majority moved on: the rank has a new holder.
	now, err := fc.other(rank, spare).awaitState(ctx, func(s *state) bool {
		_, f1 := s.Failed[rank]
		_, f2 := s.Failed[spare]
		return f1 && f2
	})
	if err != nil {
		t.Fatal(err)
	}
	if now.Ranks.at(int(st.Ranks.at(0))) == rank {
		t.Fatalf("rank still held by %d", rank)
	}
	time.Sleep(time.Second) // real processes: let the cut-off side ask in vain for a while
	for _, p := range []uint32{rank, spare} {
		if err := fc.nodes[p].lostErr(); err != nil {
			t.Fatalf("node %d gave up while still cut off: %v", p, err)
		}
	}
	fc.setRules(t, "")
	healed := time.Now()
	for _, p := range []uint32{rank, spare} {
		err, when := waitLost(t, fc.nodes[p], phase)
		if !errors.Is(err, ErrDeclaredFailed) {
			t.Fatalf("node %d gave up with %v, want ErrDeclaredFailed", p, err)
		}
		if d := when.Sub(healed); d > cutOff/2 {
			t.Fatalf("node %d learnt it was replaced %v after the heal, want promptly (bound %v)", p, d, cutOff)
		}
		t.Logf("node %d gave up %v after the heal: %v", p, when.Sub(healed).Round(time.Millisecond), err)
	}
}

// Rule: a partition shorter than the bound costs nothing: the process gets
// its contact back and does not give up.
func TestNodeShortPartitionIsNotCutOff(t *testing.T) {
	const cutOff = 4 * time.Second
	fc := newFaultyCluster(t, 3, 0, func(c *Config) { c.CutOff = cutOff })
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	leader, victim := fc.partitionOne(t, ctx)
	time.Sleep(cutOff / 2) // real processes: the partition's own length
	fc.setRules(t, "")
	if _, err := leader.propose(ctx, finish{}); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
		t.Fatalf("node %d never caught up after the heal: %v", victim.proc(), err)
	}
	select {
	case <-victim.lost():
		t.Fatalf("node %d gave up after a partition of %v (bound %v): %v", victim.proc(), cutOff/2, cutOff, victim.lostErr())
	case <-time.After(cutOff):
	}
}

func itoa(p uint32) string { return strconv.FormatUint(uint64(p), 10) }
