package spares

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// refillState is ranks 0..ranks-1 and no spare, waiting wait for joiners,
// with the ranks in lost declared failed one after the other.
func refillState(t *testing.T, ranks int, wait time.Duration, shrink bool, lost ...int) state {
	t.Helper()
	st, err := initialState(testMembers(ranks, 0, 2), ranks, shrink, wait, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range lost {
		if _, err := st.apply(declareFailed{Proc: st.Ranks.at(r), Reporter: noProc, Epoch: st.Epoch}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// Rule (state): a failed process holds a rank only while that rank
// awaits a joiner since the epoch it failed in; ranks await only with
// RefillWait set and an empty pool, in rank order.
func TestValidateAwaiting(t *testing.T) {
	if st := refillState(t, 4, time.Second, false, 0, 2); st.Validate() != nil || len(st.Awaiting) != 2 {
		t.Fatalf("two ranks awaiting: %s, %v", summarize(&st), st.Validate())
	}
	breakers := map[string]func(*state){
		"awaiting without RefillWait": func(s *state) { s.RefillWait = 0 },
		"negative RefillWait":         func(s *state) { s.RefillWait = -time.Second },
		"awaiting with a spare": func(s *state) {
			s.Procs.set(9, infoFor(9, "h1"))
			s.Spares = []uint32{9}
		},
		"wait since another epoch":   func(s *state) { s.Awaiting[0].Since = 1 },
		"live holder awaiting":       func(s *state) { s.Awaiting = append(s.Awaiting, awaiting{Rank: 3, Since: 2}) },
		"awaiting rank out of range": func(s *state) { s.Awaiting = append(s.Awaiting, awaiting{Rank: 7, Since: 2}) },
		"awaiting out of order":      func(s *state) { s.Awaiting[0], s.Awaiting[1] = s.Awaiting[1], s.Awaiting[0] },
		"failed holder not awaiting": func(s *state) { s.Awaiting = s.Awaiting[1:] },
		"vacant rank awaiting":       func(s *state) { s.Ranks = s.Ranks.with(0, noProc) },
	}
	for name, br := range breakers {
		st := refillState(t, 4, time.Second, false, 0, 2)
		br(&st)
		if err := st.Validate(); !errors.Is(err, errBadSnapshot) {
			t.Errorf("%s: Validate = %v, want ErrBadSnapshot", name, err)
		}
	}
}

// Applying the same log to two copies gives the same state, and no
// sequence of failures, joins and ends of waits breaks the invariants.
func TestApplyRandomLogsWithRefill(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		rng := seed
		next := func(n int) int {
			rng = rng*6364136223846793005 + 1442695040888963407
			return int((rng >> 33) % uint64(n))
		}
		st, err := initialState(testMembers(5, next(3), 2), 5, seed%2 == 0, time.Second, 5)
		if err != nil {
			t.Fatal(err)
		}
		a, b := st, st.Clone()
		joiner := uint32(100)
		for i := 0; i < 40; i++ {
			var cmd command
			switch next(5) {
			case 0, 1:
				cmd = declareFailed{Proc: uint32(next(8)), Reporter: noProc, Epoch: a.Epoch}
			case 2:
				if next(3) == 0 && a.Procs.len() > 0 {
					cmd = declareFailed{Proc: joiner - 1, Reporter: noProc, Epoch: a.Epoch}
				} else {
					cmd = addSpare{Proc: joiner, Info: infoFor(joiner, "hj")}
					joiner++
				}
			case 3:
				r := next(5)
				since, ok := a.AwaitingSince(r)
				if !ok || next(4) == 0 {
					since = uint64(next(int(a.Epoch) + 1))
				}
				cmd = endWait{Rank: r, Since: since}
			default:
				cmd = finish{}
				if next(4) != 0 {
					continue
				}
			}
			ra, ea := a.apply(cmd)
			rb, eb := b.apply(cmd)
			if !reflect.DeepEqual(ra, rb) || fmt.Sprint(ea) != fmt.Sprint(eb) || !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d step %d: copies diverged on %#v", seed, i, cmd)
			}
			if err := a.Validate(); err != nil {
				t.Fatalf("seed %d step %d after %#v: %v\n%s", seed, i, cmd, err, summarize(&a))
			}
			if ea == nil {
				again := a.Clone()
				if r2, _ := again.apply(cmd); r2.Changed {
					t.Fatalf("seed %d step %d: %#v applied twice changed the state again", seed, i, cmd)
				}
			}
		}
	}
}

// The new fields travel in the encoded state (snapshots and the tree's
// whole states); a state of version 2, written before they existed, still
// decodes, without waiting.
func TestStateCodecWithAwaiting(t *testing.T) {
	st := refillState(t, 4, 1500*time.Millisecond, true, 1, 3)
	b, err := encodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil || !reflect.DeepEqual(normState(got), normState(st)) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, st)
	}
	for i := 0; i < len(b); i++ {
		if _, err := decodeState(b[:i]); !errors.Is(err, errBadSnapshot) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	v2 := encodeRaw(t, 2, 1, 1, []uint32{0}, [][]any{{0, "d0", "h0", "r0", "c0"}}, []uint32{}, [][]any{}, 0, "", false, []uint32{0})
	old, err := decodeState(v2)
	if err != nil || old.RefillWait != 0 || old.Awaiting != nil || old.Ranks.at(0) != 0 {
		t.Fatalf("version 2 state: %+v, %v", old, err)
	}
	for name, raw := range map[string][]byte{
		"version 3 with 11 fields": encodeRaw(t, 3, 1, 1, []uint32{0}, [][]any{{0, "d0", "h0", "r0", "c0"}}, []uint32{}, [][]any{}, 0, "", false, []uint32{0}),
		"version 9":                encodeRaw(t, 9),
		"awaiting entry of 1 field": encodeRaw(t, 3, 2, 1, []uint32{0}, [][]any{{0, "d0", "h0", "r0", "c0"}}, []uint32{}, [][]any{{0, 2}}, 0, "", false, []uint32{},
			1000, [][]any{{0}}),
	} {
		if _, err := decodeState(raw); !errors.Is(err, errBadSnapshot) {
			t.Errorf("%s: decodeState = %v, want ErrBadSnapshot", name, err)
		}
	}
	if _, err := encodeCommand(endWait{Rank: -1}); !errors.Is(err, errBadCommand) {
		t.Errorf("EndWait of rank -1 encoded: %v", err)
	}
	if kindEndWait.String() != "EndWait" || (endWait{}).Kind() != kindEndWait {
		t.Errorf("EndWait's kind is %v", kindEndWait)
	}
}

// Rule (refill clock): the leader times each wait from when it first saw
// it; a wait falls due RefillWait later; a wait that ended is forgotten;
// a new leadership (reset) starts every wait afresh, which only delays
// the end; a rank that waits again waits a whole RefillWait again.
func TestRefillClock(t *testing.T) {
	const wait = 2 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	st := refillState(t, 4, wait, false, 0)
	var c refillClock
	check := func(now time.Duration, wantDue []endWait, wantNext time.Duration) {
		t.Helper()
		due, next := c.observe(&st, at(now))
		if !slices.Equal(due, wantDue) || (wantNext < 0) != next.IsZero() || (wantNext >= 0 && !next.Equal(at(wantNext))) {
			t.Fatalf("at %v: due %v next %v, want %v next t0+%v", now, due, next.Sub(t0), wantDue, wantNext)
		}
	}
	check(0, nil, wait)
	check(time.Second, nil, wait) // not restarted by a later look
	if _, err := st.apply(declareFailed{Proc: st.Ranks.at(2), Reporter: noProc, Epoch: st.Epoch}); err != nil {
		t.Fatal(err)
	}
	check(1500*time.Millisecond, nil, wait) // the earliest end first
	check(wait, []endWait{{Rank: 0, Since: 2}}, 3500*time.Millisecond)
	check(wait+time.Millisecond, []endWait{{Rank: 0, Since: 2}}, 3500*time.Millisecond) // due until it ends
	if _, err := st.apply(endWait{Rank: 0, Since: 2}); err == nil && st.Status == statusRunning {
		t.Fatalf("EndWait without shrink left the job running: %s", summarize(&st))
	}
	// The job failed: nothing is timed any more.
	check(3*time.Second, nil, -1)
	if len(c.seen) != 0 {
		t.Fatalf("clock still holds %v after the job ended", c.seen)
	}

	// A new leadership, and a rank that waits again.
	st = refillState(t, 4, wait, true, 1)
	c = refillClock{}
	check(0, nil, wait)
	c.reset()
	check(time.Second, nil, time.Second+wait) // later, never sooner
	if _, err := st.apply(addSpare{Proc: 9, Info: infoFor(9, "hj")}); err != nil {
		t.Fatal(err)
	}
	check(1500*time.Millisecond, nil, -1)
	if _, err := st.apply(declareFailed{Proc: 9, Reporter: noProc, Epoch: st.Epoch}); err != nil {
		t.Fatal(err)
	}
	check(4*time.Second, nil, 4*time.Second+wait)
	check(4*time.Second+wait, []endWait{{Rank: 1, Since: st.Epoch}}, -1)
}

// A failed process that still holds its rank (awaiting a joiner) is not
// promoted: it is told it was declared failed.
func TestPromotionOfFailedHolder(t *testing.T) {
	st := refillState(t, 3, time.Second, false, 1)
	if _, _, err := promotion(&st, 1); !errors.Is(err, ErrDeclaredFailed) {
		t.Fatalf("failed holder of an awaiting rank: %v, want ErrDeclaredFailed", err)
	}
	if r, done, err := promotion(&st, 2); r != 2 || !done || err != nil {
		t.Fatalf("live rank holder: %d %v %v", r, done, err)
	}
	if v := verdict(standingOf(&st, 1), 0); !errors.Is(v, ErrDeclaredFailed) {
		t.Fatalf("standing of the failed holder: %v", v)
	}
}

// The view lists the joiners (ids past the original table) with their
// addresses, failed ones included, in id order; a rank that awaits shows
// its failed holder.
func TestViewJoined(t *testing.T) {
	st := refillState(t, 3, time.Second, false, 0, 2)
	for _, p := range []uint32{5, 3} {
		if _, err := st.apply(addSpare{Proc: p, Info: infoFor(p, "hj")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.apply(declareFailed{Proc: 5, Reporter: noProc, Epoch: st.Epoch}); err != nil {
		t.Fatal(err)
	}
	m := &Membership{node: &Node{cfg: Config{Members: testMembers(3, 0, 2)}}}
	v := m.toView(st)
	want := []pgas.Joiner{{Proc: 3, Addr: "hj:d3", Host: "hj"}, {Proc: 5, Addr: "hj:d5", Host: "hj"}}
	if !reflect.DeepEqual(v.Joined, want) {
		t.Fatalf("Joined = %+v, want %+v", v.Joined, want)
	}
	if !slices.Equal(v.Ranks, []transport.Proc{5, 1, 3}) || !slices.Contains(v.Failed, 5) || v.Err != nil {
		t.Fatalf("view %+v (state %s)", v, summarize(&st))
	}
	if v := m.toView(refillState(t, 3, 0, false)); v.Joined != nil {
		t.Fatalf("no joiner, but Joined = %+v", v.Joined)
	}
}

func TestInitialStateRefillWait(t *testing.T) {
	if _, err := initialState(testMembers(2, 0, 1), 2, false, -time.Second, 5); !errors.Is(err, errConfig) {
		t.Fatalf("InitialState with a negative wait: %v", err)
	}
	if st, err := initialState(testMembers(2, 0, 1), 2, false, time.Minute, 5); err != nil || st.RefillWait != time.Minute {
		t.Fatalf("InitialState: RefillWait %v, %v", st.RefillWait, err)
	}
}
