package spares

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

var t0 = time.Unix(1_000_000, 0)

func testContactConfig() contactConfig {
	return contactConfigOf(ptr(DefaultConfig()))
}

func ptr[T any](v T) *T { return &v }

// run ticks core every testContactTick from `from` for d, with obs giving what
// Raft says at each tick, and returns the steps that asked for something.
func run(core *contactCore, from time.Time, d time.Duration, obs func(now time.Time) contactObs) (steps []contactStep, at []time.Time) {
	for now := from; !now.After(from.Add(d)); now = now.Add(testContactTick) {
		s := core.tick(now, obs(now))
		if s.Lost || s.Regained || s.Query || s.CutOff {
			steps, at = append(steps, s), append(at, now)
		}
	}
	return steps, at
}

// Rule: a follower that keeps hearing from a leader, and a leader, are in
// contact: nothing is asked and nobody is cut off, however long it runs.
func TestContactKeptNeverCutsOff(t *testing.T) {
	cfg := testContactConfig()
	follower := newContactCore(cfg)
	if steps, _ := run(follower, t0, time.Minute, func(now time.Time) contactObs {
		return contactObs{LastContact: now.Add(-20 * time.Millisecond)}
	}); len(steps) != 0 {
		t.Fatalf("follower in contact: %+v", steps)
	}
	leader := newContactCore(cfg)
	if steps, _ := run(leader, t0, time.Minute, func(time.Time) contactObs { return contactObs{Leader: true} }); len(steps) != 0 {
		t.Fatalf("leader: %+v", steps)
	}
}

// Rule: after QueryAfter of silence the process says so once and asks for
// its standing, one round at a time, at most once per QueryEvery; after
// Bound of silence it is cut off, once, and the core is done.
func TestContactLostQueriesThenCutsOff(t *testing.T) {
	cfg := testContactConfig()
	core := newContactCore(cfg)
	last := t0
	obs := func(time.Time) contactObs { return contactObs{LastContact: last} }
	var queries []time.Time
	lost, cut := 0, time.Time{}
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(testContactTick) {
		s := core.tick(now, obs(now))
		if s.Lost {
			lost++
			if d := now.Sub(t0); d < cfg.QueryAfter {
				t.Fatalf("Lost after %v, before QueryAfter %v", d, cfg.QueryAfter)
			}
		}
		if s.Query {
			queries = append(queries, now)
			if len(queries)%2 == 0 { // every other round takes long
				core.queryDone()
			}
		}
		if len(queries)%2 == 1 && s.Query == false && now.Sub(queries[len(queries)-1]) >= 3*cfg.QueryEvery {
			core.queryDone()
		}
		if s.CutOff {
			if !cut.IsZero() {
				t.Fatal("cut off twice")
			}
			cut = now
			if s.Silent < cfg.Bound {
				t.Fatalf("cut off with %v of silence, bound %v", s.Silent, cfg.Bound)
			}
		}
	}
	if lost != 1 {
		t.Fatalf("Lost %d times, want once", lost)
	}
	if cut.IsZero() || cut.Sub(t0) > cfg.Bound+testContactTick {
		t.Fatalf("cut off at %v, want at the bound %v", cut.Sub(t0), cfg.Bound)
	}
	if first := queries[0].Sub(t0); first < cfg.QueryAfter || first > cfg.QueryAfter+testContactTick {
		t.Fatalf("first question after %v, want at QueryAfter %v", first, cfg.QueryAfter)
	}
	for i := 1; i < len(queries); i++ {
		if gap := queries[i].Sub(queries[i-1]); gap < cfg.QueryEvery {
			t.Fatalf("questions %v apart, want at least %v", gap, cfg.QueryEvery)
		}
	}
	if len(queries) < 5 {
		t.Fatalf("only %d rounds of questions before the cut-off", len(queries))
	}
	if s := core.tick(cut.Add(time.Hour), obs(cut)); s != (contactStep{}) {
		t.Fatalf("tick after the cut-off: %+v", s)
	}
}

// Rule: a host cut off for 4s and healed is not cut off: contact comes back
// and the silence starts again from zero.
func TestContactHealedPartitionIsNotCutOff(t *testing.T) {
	cfg := testContactConfig()
	core := newContactCore(cfg)
	partitions := [][2]time.Duration{{2 * time.Second, 6 * time.Second}, {10 * time.Second, 17 * time.Second}, {20 * time.Second, 29 * time.Second}}
	last := t0
	regained := 0
	for now := t0; now.Before(t0.Add(40 * time.Second)); now = now.Add(testContactTick) {
		cut := false
		for _, p := range partitions {
			cut = cut || (now.Sub(t0) >= p[0] && now.Sub(t0) < p[1])
		}
		if !cut {
			last = now
		}
		s := core.tick(now, contactObs{LastContact: last})
		if s.CutOff {
			t.Fatalf("cut off at %v after partitions of 4s, 7s and 9s, all healed within the %v bound", now.Sub(t0), cfg.Bound)
		}
		if s.Query {
			core.queryDone()
		}
		if s.Regained {
			regained++
		}
	}
	if regained != len(partitions) {
		t.Fatalf("contact regained %d times, want %d", regained, len(partitions))
	}
}

// Rule: only awake time counts. A process stopped for a minute (SIGSTOP)
// is not cut off at its first tick after SIGCONT: it asks for its standing
// first, and is cut off only after the bound of awake silence.
func TestContactPauseDoesNotCount(t *testing.T) {
	cfg := testContactConfig()
	core := newContactCore(cfg)
	last := t0
	core.tick(t0, contactObs{LastContact: last})
	resumed := t0.Add(time.Minute)
	s := core.tick(resumed, contactObs{LastContact: last})
	if s.CutOff || s.Silent > cfg.MaxStep {
		t.Fatalf("first tick after a minute's pause: %+v", s)
	}
	var query, cut time.Time
	if s.Query {
		query = resumed // asked at once
	}
	steps, at := run(core, resumed.Add(testContactTick), time.Minute, func(time.Time) contactObs { return contactObs{LastContact: last} })
	for i, s := range steps {
		if s.Query && query.IsZero() {
			query = at[i]
		}
		if s.CutOff {
			cut = at[i]
		}
	}
	if query.IsZero() || query.Sub(resumed) > cfg.QueryAfter {
		t.Fatalf("first question %v after resuming, want within QueryAfter %v", query.Sub(resumed), cfg.QueryAfter)
	}
	if d := cut.Sub(resumed); d < cfg.Bound-cfg.MaxStep || d > cfg.Bound {
		t.Fatalf("cut off %v after resuming, want after about the bound %v of awake silence", d, cfg.Bound)
	}
}

// Rule: the verdicts. Only committed facts stop a process: declared failed
// (fenced), the job failed, the job finished without this spare (not
// promoted: it exits 0). Anything else, or no answer, changes nothing.
func TestStandingVerdict(t *testing.T) {
	cases := []struct {
		name string
		s    standing
		want error // nil: no verdict
	}{
		{"healthy rank", standing{Code: codeOK, Known: true, Epoch: 3, Rank: 2}, nil},
		{"healthy spare", standing{Code: codeOK, Known: true, Epoch: 3, Rank: -1}, nil},
		{"declared failed", standing{Code: codeOK, Known: true, Epoch: 4, FailedIn: 3, Rank: -1}, ErrDeclaredFailed},
		{"spares exhausted", standing{Code: codeOK, Known: true, Epoch: 5, Status: statusFailed, Reason: reasonSparesExhausted, Rank: 1}, ErrSparesExhausted},
		{"finished without the spare", standing{Code: codeOK, Known: true, Epoch: 2, Status: statusFinished, Rank: -1}, pgas.ErrNotPromoted},
		{"finished holding a rank", standing{Code: codeOK, Known: true, Epoch: 2, Status: statusFinished, Rank: 1}, nil},
		{"unknown process", standing{Code: codeOK, FailedIn: 3, Rank: -1}, nil},
		{"error answer", standing{Code: "internal", Known: true, FailedIn: 3}, nil},
	}
	for _, c := range cases {
		err := verdict(c.s, 7)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: verdict %v, want none", c.name, err)
		case c.want != nil && err == nil:
			t.Errorf("%s: no verdict, want %v", c.name, c.want)
		case err != nil && !errors.Is(err, c.want):
			t.Errorf("%s: verdict %v, want %v", c.name, err, c.want)
		case err != nil && !strings.Contains(err.Error(), "proc 7"):
			t.Errorf("%s: verdict %q does not name the process that answered", c.name, err)
		}
	}
	if err := verdict(standing{Code: codeOK, Known: true, FailedIn: 3}, 7); !errors.Is(err, pgas.ErrFenced) || !errors.Is(err, ErrDeclaredFailed) {
		t.Fatalf("declared failed: %v, want ErrDeclaredFailed and pgas.ErrFenced", err)
	}
}

func TestStandingCodec(t *testing.T) {
	for _, s := range []standing{
		{Code: codeOK, Epoch: 9, Status: statusFailed, Reason: reasonSparesExhausted, FailedIn: 4, Rank: -1, Known: true},
		{Code: codeOK, Epoch: 1, Rank: 0, Known: true},
		{Code: "internal", Msg: "m", Rank: maxProcs - 1},
	} {
		b, err := encodeStanding(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeStanding(b)
		if err != nil || got != s {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, s)
		}
	}
	if _, err := decodeStanding(rawArray(t, "ok")); !errors.Is(err, errProtocol) {
		t.Fatalf("short standing: %v", err)
	}
	if _, err := decodeStanding(rawArray(t, "ok", "", 1, 9, "", 0, 0, true)); !errors.Is(err, errProtocol) {
		t.Fatalf("unknown status: %v", err)
	}
}

// Rule: every known voter is asked, plus two other processes in turn, never
// this process or one already failed.
func TestStandingTargets(t *testing.T) {
	st := state{Failed: map[uint32]uint64{5: 2}, Voters: []uint32{0, 1, 2}}
	for p := uint32(0); p < 8; p++ {
		st.Procs.set(p, procInfo{CtlAddr: "x"})
	}
	seen := map[uint32]bool{}
	for round := 0; round < 4; round++ {
		got := standingTargets(&st, 2, round)
		if len(got) != 4 || got[0] != 0 || got[1] != 1 {
			t.Fatalf("round %d: %v, want voters 0 and 1 then two others", round, got)
		}
		for _, p := range got[2:] {
			if p == 2 || p == 5 || p < 3 {
				t.Fatalf("round %d asks %d", round, p)
			}
			seen[p] = true
		}
	}
	if len(seen) != 4 { // 3, 4, 6, 7
		t.Fatalf("rotation reached %v, want every live non-voter", seen)
	}
}

// Rule: a process whose standing questions reach a majority of the voters
// is not cut off, however long Raft goes without a leader (an election
// storm on a starved host): it can reach a quorum.
func TestContactQuorumAnswersCount(t *testing.T) {
	cfg := testContactConfig()
	core := newContactCore(cfg)
	warned := 0
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(testContactTick) {
		s := core.tick(now, contactObs{LastContact: t0})
		if s.CutOff {
			t.Fatalf("cut off at %v although every round reached a quorum", now.Sub(t0))
		}
		if s.Warn {
			warned++
		}
		if s.Query {
			core.reached()
			core.queryDone()
		}
	}
	if warned != 0 {
		t.Fatalf("warned %d times while reaching a quorum", warned)
	}
	// The same rounds without a quorum: cut off at the bound, warned once.
	core = newContactCore(cfg)
	for now := t0; ; now = now.Add(testContactTick) {
		s := core.tick(now, contactObs{LastContact: t0})
		if s.Warn {
			warned++
			if d := now.Sub(t0); d < cfg.Bound/2 || d > cfg.Bound/2+testContactTick {
				t.Fatalf("warned after %v, want at half the bound", d)
			}
		}
		if s.Query {
			core.queryDone()
		}
		if s.CutOff {
			break
		}
	}
	if warned != 1 {
		t.Fatalf("warned %d times, want once", warned)
	}
}

// Rule: before the first contact (the job's first election, slow on an
// overloaded machine) the bound is startupFactor times longer; after a
// first contact it is the configured one again.
func TestContactStartupBoundIsLonger(t *testing.T) {
	cfg := testContactConfig()
	core := newContactCore(cfg)
	none := func(time.Time) contactObs { return contactObs{} }
	steps, at := run(core, t0, 2*startupFactor*cfg.Bound, none)
	var cut time.Time
	for i, s := range steps {
		if s.Query {
			core.queryDone()
		}
		if s.CutOff {
			cut = at[i]
			if s.Bound != startupFactor*cfg.Bound {
				t.Fatalf("bound in force %v, want %v", s.Bound, startupFactor*cfg.Bound)
			}
		}
	}
	if d := cut.Sub(t0); cut.IsZero() || d < startupFactor*cfg.Bound || d > startupFactor*cfg.Bound+testContactTick {
		t.Fatalf("never in contact: cut off after %v, want %v", d, startupFactor*cfg.Bound)
	}
	// A process that had contact once is held to the plain bound.
	core = newContactCore(cfg)
	last := t0
	steps, at = run(core, t0, 2*cfg.Bound, func(time.Time) contactObs { return contactObs{LastContact: last} })
	for i, s := range steps {
		if s.Query {
			core.queryDone()
		}
		if s.CutOff && (at[i].Sub(t0) > cfg.Bound+testContactTick || s.Bound != cfg.Bound) {
			t.Fatalf("after a first contact: cut off at %v with bound %v, want %v", at[i].Sub(t0), s.Bound, cfg.Bound)
		}
	}
}

// Rule: a client of the voters-only mode hears from its parent about once
// per hold, with contact news as old as its freshest ancestor's: within
// the window the driver passes (longer than a Raft follower's), that is
// contact; beyond it, the silence counts.
func TestContactClientWindow(t *testing.T) {
	cfg := testContactConfig()
	c := DefaultConfig()
	window := treeFresh(&c)
	if window <= cfg.Fresh {
		t.Fatalf("client window %v not above a follower's %v", window, cfg.Fresh)
	}
	client := newContactCore(cfg)
	news := func(now time.Time) contactObs {
		// an answer every hold, each telling of contact 200ms older
		last := now.Truncate(c.TreeHold).Add(-200 * time.Millisecond)
		return contactObs{LastContact: last, Window: window}
	}
	if steps, _ := run(client, t0, time.Minute, news); len(steps) != 0 {
		t.Fatalf("client hearing fresh news every hold: %+v", steps)
	}
	// The same news judged with a follower's window is silence.
	follower := newContactCore(cfg)
	steps, _ := run(follower, t0, time.Minute, func(now time.Time) contactObs {
		o := news(now)
		o.Window = 0
		return o
	})
	if len(steps) == 0 {
		t.Fatal("news older than a follower's window counted as contact")
	}
	// Stale news (the ancestors lost the quorum) is silence for a client too.
	stale := newContactCore(cfg)
	steps, _ = run(stale, t0, time.Minute, func(now time.Time) contactObs {
		return contactObs{LastContact: t0, Window: window}
	})
	if len(steps) == 0 || !steps[len(steps)-1].CutOff {
		t.Fatalf("client with stale news was not cut off: %+v", steps)
	}
}

// testContactTick is DefaultConfig's ContactTick, the period these tests
// tick the core at.
var testContactTick = DefaultConfig().ContactTick
