package job

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/spares"
)

// on is n members of host h, each of which published cpus and cpuset as
// Extra (an empty string: not published).
type on struct {
	h            string
	n            int
	cpus, cpuset string
}

func table(groups ...on) bootstrap.Table {
	var t bootstrap.Table
	for _, g := range groups {
		for range g.n {
			extra := map[string]string{}
			if g.cpus != "" {
				extra[cpusExtra] = g.cpus
			}
			if g.cpuset != "" {
				extra[cpusetExtra] = g.cpuset
			}
			t.Members = append(t.Members, bootstrap.Member{Proc: uint32(len(t.Members)), Host: g.h, Extra: extra})
		}
	}
	t.NumRanks = len(t.Members)
	return t
}

// One factor for the job: the largest over its hosts, each host's from
// its members against the CPUs they published, beyond perCore per core,
// up to maxStretch.
func TestStretch(t *testing.T) {
	for _, c := range []struct {
		name   string
		groups []on
		want   int
		host   string
		cores  int
	}{
		{"one host at perCore per core", []on{{"a", 8, "2", "0-1"}}, 1, "a", 2},
		{"one host beyond it", []on{{"a", 9, "2", "0-1"}}, 2, "a", 2},
		{"capped", []on{{"a", 258, "2", "0-1"}}, maxStretch, "a", 2},
		{"130 on 2", []on{{"a", 130, "2", ""}}, 17, "a", 2},
		{"16 cores", []on{{"a", 64, "16", "0-15"}}, 1, "a", 16},
		// The job takes the loaded host's factor, also for the idle one's
		// processes; the table lists the idle host first.
		{"loaded host elsewhere", []on{{"b", 4, "2", "0-1"}, {"a", 100, "2", "0-1"}}, 13, "a", 2},
		{"the larger factor of two", []on{{"a", 40, "2", ""}, {"b", 100, "8", ""}}, 5, "a", 2},
		// Processes bound to a core each: the union of their lists.
		{"bound one core each", []on{{"a", 16, "1", "3"}}, 4, "a", 1},
		{"bound to distinct cores", []on{
			{"a", 1, "1", "0"}, {"a", 1, "1", "1"}, {"a", 1, "1", "2"}, {"a", 1, "1", "3"},
			{"a", 1, "1", "4"}, {"a", 1, "1", "5"}, {"a", 1, "1", "6"}, {"a", 1, "1", "7"}}, 1, "a", 8},
		{"overlapping lists", []on{{"a", 14, "4", "0-3"}, {"a", 13, "4", "2-5"}, {"a", 6, "2", "8,10"}}, 2, "a", 8},
		// A count larger than the lists (a member without one) wins.
		{"count beyond the lists", []on{{"a", 20, "1", "0"}, {"a", 1, "8", ""}}, 1, "a", 8},
		// A malformed or oversized list is ignored, the count stands.
		{"malformed list", []on{{"a", 20, "2", "3-1"}}, 3, "a", 2},
		{"list of strangers", []on{{"a", 20, "2", "x"}}, 3, "a", 2},
		{"negative count", []on{{"a", 20, "-4", ""}, {"b", 1, "2", ""}}, 3, "a", 2},
		// A host with no report counts the fewest cores reported anywhere;
		// a table with none counts one core a host.
		{"unreported host", []on{{"a", 20, "", ""}, {"b", 1, "2", ""}, {"c", 1, "64", ""}}, 3, "a", 2},
		{"nothing reported", []on{{"a", 8, "", ""}}, 2, "a", 1},
		{"ties go to the first label", []on{{"b", 9, "2", ""}, {"a", 9, "2", ""}}, 2, "a", 2},
	} {
		tb := table(c.groups...)
		f, worst := stretch(tb)
		if f != c.want || worst.Host != c.host || worst.Cores != c.cores {
			t.Errorf("%s: factor %d from host %q with %d cores, want %d from %q with %d", c.name, f, worst.Host, worst.Cores, c.want, c.host, c.cores)
		}
		// The member order does not matter.
		slices.Reverse(tb.Members)
		if g, w := stretch(tb); g != f || w != worst {
			t.Errorf("%s: reversed table: factor %d from %+v, want %d from %+v", c.name, g, w, f, worst)
		}
	}
	if f, _ := stretch(bootstrap.Table{}); f != 1 {
		t.Errorf("empty table: factor %d, want 1", f)
	}
}

func TestStretchMembership(t *testing.T) {
	cfg := spares.DefaultConfig()
	cfg.CutOff = 7 * time.Second
	hb, cut := cfg.HeartbeatTimeout, cfg.CutOff
	stretchMembership(&cfg, 4, false)
	if cfg.HeartbeatTimeout != 4*hb || cfg.CutOff != cut {
		t.Errorf("heartbeat %v, cut-off %v; want %v and the user's %v", cfg.HeartbeatTimeout, cfg.CutOff, 4*hb, cut)
	}
	if cfg.LeaderLeaseTimeout > cfg.HeartbeatTimeout {
		t.Errorf("lease %v beyond the heartbeat timeout %v", cfg.LeaderLeaseTimeout, cfg.HeartbeatTimeout)
	}
}

func TestCPUList(t *testing.T) {
	for _, c := range []struct {
		ids  []int
		list string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{1, 3, 5, 6}, "1,3,5-6"},
	} {
		if got := formatCPUList(c.ids); got != c.list {
			t.Errorf("formatCPUList(%v) = %q, want %q", c.ids, got, c.list)
		}
		if got := unionSize(parseCPUList(c.list)); got != len(c.ids) {
			t.Errorf("%q: %d CPUs, want %d", c.list, got, len(c.ids))
		}
	}
	for _, bad := range []string{"", "-", "1-", "-1", "3-1", "a", "1,,2", "1 ", fmt.Sprint(maxCPUID), "0-" + fmt.Sprint(maxCPUID)} {
		if s := parseCPUList(bad); s != nil {
			t.Errorf("parseCPUList(%q) = %v, want nil", bad, s)
		}
	}
	for _, c := range []struct {
		spans [][2]int
		want  int
	}{
		{[][2]int{{0, 3}, {2, 5}}, 6},
		{[][2]int{{4, 4}, {0, 9}}, 10},
		{[][2]int{{0, 1}, {2, 3}}, 4},
		{[][2]int{{0, 0}, {0, 0}}, 1},
		{[][2]int{{5, 9}, {0, 1}, {1, 6}}, 10},
	} {
		if got := unionSize(c.spans); got != c.want {
			t.Errorf("unionSize(%v) = %d, want %d", c.spans, got, c.want)
		}
	}
}

func TestPublishCPUs(t *testing.T) {
	long := make([]int, 0, 64)
	for i := 0; i < 128; i += 2 {
		long = append(long, i)
	}
	for _, c := range []struct {
		count        int
		ids          []int
		cpus, cpuset string
	}{
		{4, []int{0, 1, 2, 3}, "4", "0-3"},
		{2, nil, "2", ""},
		{0, nil, "1", ""},
		{64, long, "64", ""}, // too long a list: left out
	} {
		extra := map[string]string{"raft": "x"}
		publishCPUs(extra, c.count, c.ids)
		if extra[cpusExtra] != c.cpus || extra[cpusetExtra] != c.cpuset || extra["raft"] != "x" {
			t.Errorf("publishCPUs(%d, %v): %v, want cpus %q and cpuset %q", c.count, c.ids, extra, c.cpus, c.cpuset)
		}
	}
	if runtime.GOOS == "linux" {
		ids := affinity()
		if len(ids) == 0 || !slices.IsSorted(ids) {
			t.Errorf("affinity() = %v, want this process's CPUs, ascending", ids)
		}
	}
}

// Two processes on different hosts with different loads get the same
// factor, the loaded host's: each publishes its CPUs the way Init does,
// registers at a real rendezvous, and computes the factor from the table
// it gets.
func TestStretchSameOnEveryHost(t *testing.T) {
	// Host "busy": 10 processes on 2 CPUs (factor 2). Host "idle": one
	// process on 16 CPUs (alone it would be 1).
	const nprocs = 11
	hostOf := func(p int) string {
		if p == nprocs-1 {
			return "idle"
		}
		return "busy"
	}
	cpusOf := func(p int) (int, []int) {
		if hostOf(p) == "idle" {
			return 16, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
		}
		return 2, []int{0, 1}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scfg := bootstrap.LocalServerConfig()
	scfg.Listener = l
	scfg.Token = auth.NewToken()
	scfg.NumProcs, scfg.NumRanks = nprocs, nprocs
	scfg.JobID = "job"
	srv := bootstrap.NewServer(scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()

	type result struct {
		table bootstrap.Table
		err   error
	}
	results := make([]chan result, nprocs)
	for p := range nprocs {
		results[p] = make(chan result, 1)
		go func() {
			env := bootstrap.Env{Proc: uint32(p), NumProcs: nprocs, NumRanks: nprocs, Rendezvous: l.Addr().String(),
				Token: scfg.Token, Host: hostOf(p), JobID: "job", Launcher: bootstrap.LauncherPGAS}
			extra := map[string]string{"raft": fmt.Sprintf("127.0.0.1:%d", 30000+p)}
			count, ids := cpusOf(p)
			publishCPUs(extra, count, ids)
			self := bootstrap.Member{Proc: uint32(p), Addr: fmt.Sprintf("127.0.0.1:%d", 20000+p), Host: env.Host, Extra: extra}
			sess, tb, err := bootstrap.RegisterWith(ctx, bootstrap.LocalClientConfig(), env, self)
			if sess != nil {
				defer sess.Close()
			}
			results[p] <- result{tb, err}
		}()
	}
	factors := map[string]int{}
	for p := range nprocs {
		r := <-results[p]
		if r.err != nil {
			t.Fatalf("process %d: %v", p, r.err)
		}
		f, worst := stretch(r.table)
		if f != 2 || worst.Host != "busy" || worst.Procs != 10 || worst.Cores != 2 {
			t.Errorf("process %d on %s: factor %d from %+v, want 2 from host busy (10 processes, 2 CPUs)", p, hostOf(p), f, worst)
		}
		factors[hostOf(p)] = f
	}
	if factors["busy"] != factors["idle"] {
		t.Errorf("factors per host %v, want one", factors)
	}
}
