package spares

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

func mustState(t *testing.T, ranks, spares, hosts int, shrink bool) state {
	t.Helper()
	st, err := initialState(testMembers(ranks, spares, hosts), ranks, shrink, 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestHelpers(t *testing.T) {
	st := mustState(t, 4, 2, 2, false)
	if _, err := st.apply(declareFailed{Proc: 1, Reporter: 0, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		proc  uint32
		rank  int
		ok    bool
		spare bool
	}{
		{0, 0, true, false}, {1, -1, false, false}, {4, 1, true, false}, {5, -1, false, true},
		{3, 3, true, false}, {99, -1, false, false}, {noProc, -1, false, false},
	}
	for _, tc := range tests {
		r, ok := st.RankOf(tc.proc)
		if r != tc.rank || ok != tc.ok || st.IsSpare(tc.proc) != tc.spare {
			t.Errorf("proc %d: RankOf = %d,%v IsSpare = %v; want %d,%v,%v", tc.proc, r, ok, st.IsSpare(tc.proc), tc.rank, tc.ok, tc.spare)
		}
	}
	for rank, want := range []uint32{0, 4, 2, 3} {
		if p, ok := st.ProcOf(rank); !ok || p != want {
			t.Errorf("ProcOf(%d) = %d,%v, want %d", rank, p, ok, want)
		}
	}
	for _, bad := range []int{-1, 4, 1 << 30} {
		if p, ok := st.ProcOf(bad); ok || p != noProc {
			t.Errorf("ProcOf(%d) = %d,%v, want NoProc,false", bad, p, ok)
		}
	}
	if e, ok := st.IsFailed(1); !ok || e != 2 {
		t.Errorf("IsFailed(1) = %d,%v, want 2,true", e, ok)
	}
	// Clone is deep: mutating the clone leaves the original alone.
	c := st.Clone()
	c.Ranks = c.Ranks.with(0, 77)
	c.Spares[0], c.Voters[0] = 77, 77
	c.Procs.set(77, procInfo{})
	c.Failed[77] = 1
	if st.Ranks.at(0) == 77 || st.Spares[0] == 77 || st.Voters[0] == 77 || st.Procs.len() != 6 || len(st.Failed) != 1 {
		t.Fatalf("Clone shares memory with the original: %+v", st)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := st.FailedProcs(); !slices.Equal(got, []uint32{1}) || st.Err() != nil {
		t.Fatalf("FailedProcs = %v, Err = %v", got, st.Err())
	}
	st.Status, st.StatusReason = statusFailed, reasonSparesExhausted
	if !errors.Is(st.Err(), ErrSparesExhausted) {
		t.Fatalf("Err of an exhausted job: %v", st.Err())
	}
}

func TestValidateCatchesBrokenStates(t *testing.T) {
	breakers := map[string]func(*state){
		"rank holder also spare": func(s *state) { s.Spares = append(s.Spares, s.Ranks.at(0)) },
		"two ranks":              func(s *state) { s.Ranks = s.Ranks.with(1, s.Ranks.at(0)) },
		"failed holds rank":      func(s *state) { s.Failed[s.Ranks.at(0)] = 1 },
		"unknown voter":          func(s *state) { s.Voters = append(s.Voters, 1000) },
		"NumRanks mismatch":      func(s *state) { s.NumRanks++ },
		"failed in the future":   func(s *state) { s.Failed[s.Spares[0]] = 9; s.Spares = s.Spares[1:] },
		"epoch zero":             func(s *state) { s.Epoch = 0 },
		"long host":              func(s *state) { s.Procs.set(0, procInfo{Host: strings.Repeat("x", maxAddrLen+1)}) },
	}
	for name, br := range breakers {
		st := mustState(t, 3, 2, 1, false)
		br(&st)
		if err := st.Validate(); !errors.Is(err, errBadSnapshot) {
			t.Errorf("%s: Validate = %v, want ErrBadSnapshot", name, err)
		}
	}
}

func TestApplyRejectsWithoutMutating(t *testing.T) {
	st := mustState(t, 3, 1, 1, false)
	before := st.Clone()
	for _, cmd := range []command{
		declareFailed{Proc: 9, Reporter: noProc},
		declareFailed{Proc: 0, Reporter: 9},
		declareFailed{Proc: 0, Reporter: noProc, Epoch: 2},
		addSpare{Proc: noProc},
		addSpare{Proc: 0, Info: procInfo{Host: "other"}},
		addSpare{Proc: 8, Info: procInfo{Addr: strings.Repeat("a", 300)}},
		setVoters{Voters: make([]uint32, voterCap+1)},
		nil,
		&finish{},
	} {
		if _, err := st.apply(cmd); err == nil {
			t.Errorf("Apply(%#v) succeeded", cmd)
		}
		if !reflect.DeepEqual(st, before) {
			t.Fatalf("Apply(%#v) mutated the state on error", cmd)
		}
	}
}

// Applying the same log to two copies gives the same state (determinism),
// and no sequence breaks the invariants.
func TestApplyDeterministicRandomLogs(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := seed
		next := func(n int) int {
			rng = rng*6364136223846793005 + 1442695040888963407
			return int((rng >> 33) % uint64(n))
		}
		a := mustState(t, 5, 3, 2, seed%2 == 0)
		b := a.Clone()
		for i := 0; i < 30; i++ {
			var cmd command
			switch next(4) {
			case 0, 1:
				cmd = declareFailed{Proc: uint32(next(10)), Reporter: uint32(next(9)), Epoch: uint64(next(int(a.Epoch) + 1))}
			case 2:
				p := uint32(8 + next(4))
				cmd = addSpare{Proc: p, Info: infoFor(p, "h1")}
			default:
				cmd = setVoters{Voters: []uint32{uint32(next(12)), uint32(next(12))}}
			}
			ra, ea := a.apply(cmd)
			rb, eb := b.apply(cmd)
			if !reflect.DeepEqual(ra, rb) || fmt.Sprint(ea) != fmt.Sprint(eb) || !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d step %d: copies diverged on %#v", seed, i, cmd)
			}
			if err := a.Validate(); err != nil {
				t.Fatalf("seed %d step %d after %#v: %v", seed, i, cmd, err)
			}
		}
	}
}

func TestChooseVoters(t *testing.T) {
	mk := func(hosts ...string) []Member {
		var ms []Member
		for i, h := range hosts {
			ms = append(ms, Member{Proc: uint32(i), Host: h})
		}
		return ms
	}
	tests := []struct {
		members []Member
		max     int
		want    []uint32
	}{
		{mk("a", "a", "b", "b", "c", "c"), 5, []uint32{0, 2, 4, 1, 3}},
		{mk("a", "a", "a", "a", "a", "a", "a"), 5, []uint32{0, 1, 2, 3, 4}},
		{mk("a", "b"), 5, []uint32{0, 1}},
		{mk("a", "b", "c", "d", "e", "f", "g"), 5, []uint32{0, 1, 2, 3, 4}},
		{mk("a", "a", "a", "b"), 3, []uint32{0, 3, 1}},
		{mk("a", "a", "a", "b"), 1, []uint32{0}},
	}
	for _, tc := range tests {
		if got := chooseVoters(tc.members, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("ChooseVoters(%v, %d) = %v, want %v", tc.members, tc.max, got, tc.want)
		}
	}
}

func TestPlanVoters(t *testing.T) {
	// 8 procs over hosts h0,h1,h2 (proc i on h(i%3)); ranks 0..5, spares 6,7.
	base := func() state { return mustStateT(8, 6) }
	srv := func(voters []uint32, nonvoters ...uint32) []raftServer {
		var out []raftServer
		for _, v := range voters {
			out = append(out, raftServer{Proc: v, Voter: true})
		}
		for _, v := range nonvoters {
			out = append(out, raftServer{Proc: v})
		}
		return out
	}
	tests := []struct {
		name    string
		mutate  func(*state)
		servers []raftServer
		self    uint32
		want    voterPlan
	}{
		{"in line", nil, srv([]uint32{0, 1, 2, 3, 4}, 5, 6, 7), 0,
			voterPlan{Voters: []uint32{0, 1, 2, 3, 4}}},
		{"failed voter replaced on its host", func(s *state) { s.Failed[1] = 2; s.Epoch = 2 }, srv([]uint32{0, 1, 2, 3, 4}, 5, 6, 7), 0,
			// voters left: 0(h0) 2(h2) 3(h0) 4(h1); candidates 5(h2) 6(h0) 7(h1): h1 and h2 have one voter each, lowest id wins
			voterPlan{Remove: []uint32{1}, Promote: []uint32{5}, Voters: []uint32{0, 2, 3, 4, 5}}},
		{"leader removes itself last", func(s *state) { s.Failed[0] = 2; s.Failed[2] = 2; s.Epoch = 2 }, srv([]uint32{0, 1, 2, 3, 4}, 5, 6, 7), 0,
			voterPlan{Remove: []uint32{2, 0}, Promote: []uint32{5, 6}, Voters: []uint32{1, 3, 4, 5, 6}}},
		{"failed non-voter removed, missing proc added", func(s *state) { s.Failed[6] = 2; s.Epoch = 2 }, srv([]uint32{0, 1, 2, 3, 4}, 5, 6), 0,
			voterPlan{Remove: []uint32{6}, AddNonvoter: []uint32{7}, Voters: []uint32{0, 1, 2, 3, 4}}},
		{"not enough candidates", func(s *state) { s.Failed[0] = 2; s.Failed[1] = 2; s.Epoch = 2 }, srv([]uint32{0, 1, 2}), 2,
			voterPlan{Remove: []uint32{0, 1}, AddNonvoter: []uint32{3, 4, 5, 6, 7}, Voters: []uint32{2}}},
		{"unknown server removed", nil, srv([]uint32{0, 1, 2, 3, 4, 40}, 5, 6, 7), 0,
			voterPlan{Remove: []uint32{40}, Voters: []uint32{0, 1, 2, 3, 4}}},
	}
	for _, tc := range tests {
		st := base()
		if tc.mutate != nil {
			tc.mutate(&st)
		}
		got := planVoters(&st, tc.servers, 5, tc.self, false)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func mustStateT(procs, ranks int) state {
	st, err := initialState(testMembers(ranks, procs-ranks, 3), ranks, false, 0, 5)
	if err != nil {
		panic(err)
	}
	return st
}

func TestPromotionAndEpochOutcomes(t *testing.T) {
	st := mustState(t, 2, 2, 1, false) // ranks 0,1; spares 2,3
	run := func(mut func(*state)) *state { s := st.Clone(); mut(&s); return &s }
	failed := run(func(s *state) { s.Status, s.StatusReason = statusFailed, reasonSparesExhausted })
	lost := run(func(s *state) { s.Status, s.StatusReason = statusFailed, reasonAllRanksLost })
	finished := run(func(s *state) { s.Status = statusFinished })
	declared := run(func(s *state) { s.Epoch = 2; s.Failed[3] = 2; s.Spares = []uint32{2} })
	tests := []struct {
		st       *state
		self     uint32
		rank     int
		done     bool
		err      error
		minEpoch uint64
		epochErr error
		epochOK  bool
	}{
		{&st, 0, 0, true, nil, 1, nil, true},
		{&st, 2, -1, false, nil, 2, nil, false},
		{failed, 2, -1, true, ErrSparesExhausted, 1, ErrSparesExhausted, true},
		{failed, 1, 1, true, nil, 9, ErrSparesExhausted, true},
		{lost, 2, -1, true, ErrJobFailed, 1, ErrJobFailed, true},
		{finished, 3, -1, true, errJobFinished, 2, errJobFinished, true},
		{finished, 3, -1, true, errJobFinished, 1, nil, true},
		{declared, 3, -1, true, ErrDeclaredFailed, 2, nil, true},
	}
	for i, tc := range tests {
		rank, done, err := promotion(tc.st, tc.self)
		if rank != tc.rank || done != tc.done || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%d: promotion(self %d) = %d,%v,%v; want %d,%v,%v", i, tc.self, rank, done, err, tc.rank, tc.done, tc.err)
		}
		ok, err := epochReached(tc.st, tc.minEpoch)
		if ok != tc.epochOK || !errors.Is(err, tc.epochErr) || (tc.epochErr == nil) != (err == nil) {
			t.Errorf("%d: epochReached(%d) = %v,%v; want %v,%v", i, tc.minEpoch, ok, err, tc.epochOK, tc.epochErr)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := LocalConfig()
		c.Proc, c.NumRanks, c.Members, c.Token = 0, 4, testMembers(4, 2, 2), auth.NewToken()
		return c
	}
	if err := func() error { c := good(); return c.validate() }(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	if c := DefaultConfig(); c.HeartbeatTimeout > time.Second || c.HeartbeatTimeout < 50*time.Millisecond {
		t.Errorf("DefaultConfig heartbeat %v: want low hundreds of ms", c.HeartbeatTimeout)
	}
	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"proc missing", func(c *Config) { c.Proc = 9 }, "Proc 9 is not in Members"},
		{"ranks mismatch", func(c *Config) { c.NumRanks = 5 }, "NumRanks is 5 but Members has 4"},
		{"short token", func(c *Config) { c.Token = []byte("x") }, "Token is weak: 1 bytes, want at least 16"},
		{"repeated token", func(c *Config) { c.Token = bytes.Repeat([]byte("abcdefghij"), 3) }, "Token is weak: a pattern of 10 bytes repeated"},
		{"voters", func(c *Config) { c.MaxVoters = 0 }, "MaxVoters is 0"},
		{"lease", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, "LeaderLeaseTimeout 1s is above HeartbeatTimeout"},
		{"election", func(c *Config) { c.ElectionTimeout = time.Millisecond }, "ElectionTimeout 1ms is below HeartbeatTimeout"},
		{"dup proc", func(c *Config) { c.Members[1].Proc = 0 }, "proc 0 appears twice"},
		{"dup raft addr", func(c *Config) { c.Members[1].RaftAddr = c.Members[0].RaftAddr }, "share RaftAddr"},
		{"no ctl addr", func(c *Config) { c.Members[2].CtlAddr = "" }, "needs both RaftAddr and CtlAddr"},
		{"reserved proc", func(c *Config) { c.Members[3].Proc = noProc }, "reserved"},
		{"retry", func(c *Config) { c.ProposeRetryMax = time.Microsecond }, "ProposeRetryMax"},
		{"zero", func(c *Config) { c.RPCTimeout = 0 }, "RPCTimeout is 0s"},
		{"refill wait", func(c *Config) { c.RefillWait = -time.Second }, "RefillWait is -1s"},
		{"join as member", func(c *Config) { c.Join = true }, "already in Members"},
		{"join self mismatch", func(c *Config) { c.Join, c.Proc, c.Self.Proc = true, 9, 8 }, "Self.Proc 8 but Proc 9"},
		{"join without addrs", func(c *Config) { c.Join, c.Proc, c.Self.Proc = true, 9, 9 }, "needs Self.RaftAddr"},
	}
	for _, tc := range tests {
		c := good()
		tc.mut(&c)
		snapshot := fmt.Sprintf("%+v", c)
		err := c.validate()
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want ErrConfig mentioning %q", tc.name, err, tc.want)
		}
		if fmt.Sprintf("%+v", c) != snapshot {
			t.Errorf("%s: Validate mutated the config", tc.name)
		}
	}
}
