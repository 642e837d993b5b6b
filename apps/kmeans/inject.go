package kmeans

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/inject"
	"github.com/gaspigo/gaspigo/pgas"
)

// Inject is one injected failure: a real SIGKILL of the process that holds
// a rank when the job first completes an iteration. Iterations redone after
// a recovery never fire an injection again.
type Inject struct {
	// Exactly one target: Rank >= 0, Host != "", Leader, or MirrorOf >= 0.
	Rank     int
	Host     string // every rank whose process has this host label
	Leader   bool   // the process that leads the Raft membership
	MirrorOf int    // the rank that holds this rank's checkpoint mirror
	// Iter is the iteration after which (or during whose checkpoint commit)
	// the kill happens, 1-based; 0 names the job's setup, with one of the
	// setup phases or with Phase "commit" (the commit of the starting
	// checkpoint, before any was committed).
	Iter int
	// Phase: "" kills after the iteration; "commit" kills inside the
	// checkpoint commit that follows the iteration. The setup phases
	// (iter=0 only) kill a starting rank before a collective step of its
	// setup, while the others are inside it: "init" before the starting
	// centroids (NewJob; collective with an input file and no --init, or
	// with k-means++ seeding), "ckpt-new" before the checkpointer's
	// creation (ckpt.New, which creates its segments collectively).
	Phase string
}

// ParseInject parses kill:rank=R,iter=I[,phase=commit], kill:host=H,iter=I,
// kill:leader,iter=I and kill:mirror-of=R,iter=I, and with iter=0 the
// setup phases: kill:rank=R,iter=0,phase=init|ckpt-new.
func ParseInject(s string) (Inject, error) {
	k, err := inject.Parse(s, injectGrammar)
	if err != nil {
		return Inject{}, fmt.Errorf("kmeans: %w", err)
	}
	in := Inject{Rank: k.Int("rank"), Host: k.Text("host"), Leader: k.Has("leader"), MirrorOf: k.Int("mirror-of"),
		Iter: k.Int("iter"), Phase: k.Text("phase")}
	bad := func(why string) (Inject, error) { return Inject{}, fmt.Errorf("kmeans: %w", k.Errorf("%s", why)) }
	if !k.Has("iter") {
		return bad("iter is missing")
	}
	if setupPhase(in.Phase) && (in.Iter != 0 || in.Rank < 0) {
		return bad("phase=" + in.Phase + " is a step of the setup: give iter=0 and a rank target")
	}
	if in.Iter == 0 && !setupPhase(in.Phase) && (in.Phase != "commit" || in.MirrorOf >= 0) {
		return bad("iter=0 names the commit of the starting checkpoint: give phase=commit with a rank, host or leader target (iterations count from 1)")
	}
	return in, nil
}

// injectGrammar is K-means's kill language (package inject).
var injectGrammar = &inject.Grammar{Keys: []inject.Key{
	{Name: "rank", Kind: inject.Rank, Target: true},
	{Name: "host", Kind: inject.Label, Target: true},
	{Name: "leader", Kind: inject.Flag, Target: true},
	{Name: "mirror-of", Kind: inject.Rank, Target: true},
	{Name: "iter", Kind: inject.Count},
	{Name: "phase", Kind: inject.Word, Words: []string{"commit", "init", "ckpt-new"}},
}, Want: "kill:rank=R,iter=I, kill:host=H,iter=I, kill:leader,iter=I or kill:mirror-of=R,iter=I, optionally with ,phase=commit; or kill:rank=R,iter=0,phase=init|ckpt-new"}

// CheckInjects refuses an injection that could never fire in a job of
// size ranks: a rank or mirror-of at or past size, or a host label that no
// process has (hosts: every process's label, spares included, as
// pgas.Runtime.HostLabels returns them; nil when the labels are unknown).
// The error wraps ErrConfig.
func CheckInjects(injects []Inject, size int, hosts []string) error {
	for _, in := range injects {
		switch {
		case in.Rank >= size:
			return configErr("--inject kill:rank=%d,iter=%d: the job has ranks 0..%d; name one of them", in.Rank, in.Iter, size-1)
		case in.MirrorOf >= size:
			return configErr("--inject kill:mirror-of=%d,iter=%d: the job has ranks 0..%d; name one of them", in.MirrorOf, in.Iter, size-1)
		case in.Host != "" && hosts == nil:
			return configErr("--inject kill:host=%s,iter=%d: the processes have no host labels; start the job with gaspirun (--host-labels or --ranks-per-host label them)", in.Host, in.Iter)
		case in.Host != "" && !slices.Contains(hosts, in.Host):
			labels := slices.Compact(slices.Sorted(slices.Values(hosts)))
			return configErr("--inject kill:host=%s,iter=%d: no process has that host label; the labels are %s", in.Host, in.Iter, strings.Join(labels, ", "))
		}
	}
	return nil
}

// Kill is an injection that hit this rank, for Options.Kill.
type Kill struct {
	Inject Inject
	Rank   int
	Iter   int    // the iteration just completed
	Phase  string // "" after the iteration, "commit" inside the checkpoint commit, or a setup phase
}

// setupPhase reports whether phase names a step of the setup (Inject.Phase).
func setupPhase(phase string) bool { return phase == "init" || phase == "ckpt-new" }

// inject fires the injections due now, the first time the job gets here
// (fresh: iteration j.iter was never completed before). Every rank calls
// it at the same point; a due kill:leader injection makes it collective.
//
// A promoted spare fires nothing in the iteration its predecessor was lost
// in (the one after the job's high mark at its restore; it still takes
// part in a kill:leader decision, a collective): the predecessor may have
// got there, fired there and taken what it knew with it, when the
// survivors never completed that iteration (its result was still on its
// way through the lost process). Two injections due to one rank in that
// iteration would lose the second.
//
// An injection that names a rank is judged by rankFresh instead (the
// holders of every rank completed fewer iterations than j.iter, Job.low):
// a survivor whose iteration a recovery cut short, while another rank had
// completed it, never fired its kill there, and does when it gets there
// again. Targets that a rank does not name (the leader, a host, a mirror)
// may be another process after the recovery, so they keep to fresh: they
// fire once, or not at all when the process they hit was lost first.
func (j *Job) inject(ctx context.Context, phase string, fresh, rankFresh bool) error {
	if !fresh && !rankFresh {
		return nil // a redone iteration
	}
	quiet := j.promotedAt >= 0 && j.iter <= j.promotedAt+1 // see above
	me := j.rt.Rank()
	for _, in := range j.opt.Injects {
		if in.Iter != j.iter || in.Phase != phase {
			continue
		}
		if byRank := in.Rank >= 0; (byRank && !rankFresh) || (!byRank && !fresh) {
			continue
		}
		hit := in.Rank == me ||
			(in.Host != "" && j.rt.Host(me) == in.Host) ||
			(in.MirrorOf >= 0 && j.ck != nil && slices.Contains(j.ck.Holders(in.MirrorOf), me))
		if in.Leader {
			var err error
			if hit, err = j.isAgreedLeader(ctx); err != nil {
				return err
			}
		}
		if hit && !quiet {
			j.flushBeforeKill(ctx)
			j.opt.Kill(Kill{Inject: in, Rank: me, Iter: j.iter, Phase: phase})
		}
	}
	return nil
}

// flushBeforeKill lets a victim's committed checkpoints reach the disk
// level first, when the job has one (bounded by diskFlushWait): the
// scenarios that kill beyond the in-memory redundancy are about the disk
// copy, which a slow disk (fsyncs on a busy machine) would otherwise leave
// to chance. The kill stays where the injection puts it in the iteration.
func (j *Job) flushBeforeKill(ctx context.Context) {
	f, ok := j.ck.(interface{ FlushDisk(context.Context) error })
	if !ok {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, diskFlushWait)
	defer cancel()
	if err := f.FlushDisk(fctx); err != nil {
		j.printf("inject: the disk level before the kill: %v\n", err)
	}
}

// diskFlushWait bounds flushBeforeKill.
const diskFlushWait = 10 * time.Second

// leaderWait bounds the wait for a Raft leader at a kill:leader injection.
const leaderWait = time.Minute

// leaderMoves bounds the moves of the leadership at one kill:leader
// injection.
const leaderMoves = 3

// moveWait bounds the wait for the leader the leadership was moved to.
// Every membership names it within milliseconds as a rule; under a flood
// of connections the leadership flapped for a minute (kmtier's
// TestFloodKillLeader in CI), a rank that waited the whole leaderWait for
// it held the job past its deadline. After moveWait the ranks agree on
// the leader they know, and move again if it is a spare.
const moveWait = 5 * time.Second

// isAgreedLeader decides a kill:leader injection collectively: every rank
// waits until its membership knows a leader (the election may still be
// under way early in a run), the ranks agree on one leader process (the
// highest any of them saw, so a change of leader between their looks
// still kills at most one), and this reports whether it is this process.
// A leader that holds no rank (an idle spare, which often wins the first
// election) cannot be killed from inside the job: with Options.MoveLeader
// the reporting rank moves the leadership onto a rank, every rank waits
// until its membership names that leader, and the ranks agree again. A
// leader still without a rank after that is not killed, and the reporting
// rank says so on stderr.
func (j *Job) isAgreedLeader(ctx context.Context) (bool, error) {
	if j.opt.Leader == nil {
		j.printf("inject: kill:leader after iteration %d: the membership has no leader to ask; nothing killed\n", j.iter)
		return false, nil
	}
	want := int64(-1) // the leader moved to, once moved
	for move := 0; ; move++ {
		leader, mine, err := j.agreeLeader(ctx, want)
		if err != nil {
			return false, err
		}
		h := []int64{mine}
		if err := pgas.Allreduce(ctx, j.rt, nil, h, pgas.OpSum); err != nil {
			return false, err
		}
		if h[0] > 0 {
			return mine == 1, nil
		}
		if j.opt.MoveLeader == nil || move == leaderMoves {
			if j.reporter() {
				fmt.Fprintf(os.Stderr, "inject: kill:leader after iteration %d: the Raft leader is process %d, which holds no rank (an idle spare); nothing killed\n", j.iter, leader)
			}
			return false, nil
		}
		to := []int64{-1}
		if j.reporter() {
			mctx, cancel := context.WithTimeout(ctx, leaderWait)
			p, err := j.opt.MoveLeader(mctx)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "inject: kill:leader after iteration %d: moving the leadership off the idle spare %d: %v\n", j.iter, leader, err)
			} else {
				to[0] = int64(p)
			}
		}
		if err := pgas.Allreduce(ctx, j.rt, nil, to, pgas.OpMax); err != nil {
			return false, err
		}
		if to[0] < 0 {
			return false, nil // said above
		}
		if j.reporter() {
			fmt.Fprintf(os.Stderr, "inject: kill:leader after iteration %d: the Raft leader was process %d, an idle spare; the leadership moved to process %d\n", j.iter, leader, to[0])
		}
		want = to[0]
	}
}

// agreeLeader waits until this rank's membership knows a leader (want, if
// it is not -1, for moveWait, then any) for up to leaderWait, and returns
// the leader the ranks agree on (the highest seen) and 1 if it is this
// process, else 0.
func (j *Job) agreeLeader(ctx context.Context, want int64) (leader, mine int64, err error) {
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	moved := time.Now().Add(moveWait)
	seen := int64(-1)
	for {
		if p, ok := j.opt.Leader(); ok {
			seen = int64(p)
			if want < 0 || seen == want || time.Now().After(moved) {
				break // the moved leader, or after moveWait the one known
			}
		}
		select {
		case <-wctx.Done():
		case <-tick.C:
			continue
		}
		if seen < 0 {
			return 0, 0, fmt.Errorf("kmeans: kill:leader after iteration %d: no Raft leader known after %v", j.iter, leaderWait)
		}
		break // the moved leader was not seen in time: agree on the one known
	}
	v := []int64{seen}
	if err := pgas.Allreduce(ctx, j.rt, nil, v, pgas.OpMax); err != nil {
		return 0, 0, err
	}
	if v[0] == int64(j.rt.Proc()) {
		mine = 1
	}
	return v[0], mine, nil
}
