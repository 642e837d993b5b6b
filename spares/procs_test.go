package spares

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// The real-process tier of the membership: N processes, each one Node
// of the voters-only mode over loopback TCP (the test binary re-executed),
// behind -spares.procs=N. It measures what a job of N processes on one
// host costs the membership: sockets per process, the time from a kill
// to every survivor's new epoch, and the time to shut every node down.

var (
	procsN       = flag.Int("spares.procs", 0, "run TestProcsKillRankHolder with this many real processes (e.g. 512)")
	procsAllRaft = flag.Bool("spares.allraft", false, "run TestProcsKillRankHolder in the all-Raft mode (to compare)")
)

const childEnv = "SPARES_TEST_CHILD"

type childTable struct {
	Members  []Member
	NumRanks int
	Token    []byte
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild is one process of TestProcsKillRankHolder: it runs a Node on
// the listeners it inherited (fds 3 and 4), prints every view it applies,
// obeys "report <proc> <epoch>" and "finish" on stdin, and shuts down at
// EOF.
func runChild() int {
	proc, _ := strconv.ParseUint(os.Getenv(childEnv), 10, 32)
	b, err := os.ReadFile(os.Getenv(childEnv + "_TABLE"))
	var tab childTable
	if err == nil {
		err = json.Unmarshal(b, &tab)
	}
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	raftLn, err1 := net.FileListener(os.NewFile(3, "raft"))
	ctlLn, err2 := net.FileListener(os.NewFile(4, "ctl"))
	if err1 != nil || err2 != nil {
		fmt.Println("error", err1, err2)
		return 2
	}
	cfg := DefaultConfig()
	cfg.Proc, cfg.Members, cfg.NumRanks, cfg.Token = uint32(proc), tab.Members, tab.NumRanks, tab.Token
	cfg.RaftListener, cfg.CtlListener = raftLn, ctlLn
	cfg.CutOff = time.Minute // a loaded machine: this tier measures, it does not cut off
	cfg.VotersOnly = os.Getenv(childEnv+"_ALLRAFT") == ""
	cfg.Logger = testLogger()
	node, err := NewNode(cfg)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	var out sync.Mutex
	say := func(format string, a ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	go func() {
		for st := range node.watch() {
			say("view %d %s", st.Epoch, st.Status)
		}
	}()
	go func() {
		<-node.lost()
		say("lost %v", node.lostErr())
	}()
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "report":
			p, _ := strconv.ParseUint(f[1], 10, 32)
			e, _ := strconv.ParseUint(f[2], 10, 64)
			c, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := node.reportFailure(c, uint32(p), node.proc(), e)
			cancel()
			say("reported %v", err)
		case len(f) == 1 && f[0] == "finish":
			c, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := node.propose(c, finish{})
			cancel()
			say("finished %v", err)
		}
	}
	raft, leader, served := node.raftNode() != nil, node.IsLeader(), node.followAnswers()
	start := time.Now()
	err = node.Shutdown()
	say("stats raft=%v leader=%v served=%d shutdown=%v err=%v", raft, leader, served, time.Since(start).Round(time.Millisecond), err)
	return 0
}

type child struct {
	proc  uint32
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type childEvent struct {
	proc uint32
	line string
}

func TestProcsKillRankHolder(t *testing.T) {
	n := *procsN
	if n == 0 {
		t.Skip("real-process tier: run with -spares.procs=N (e.g. 512)")
	}
	if n < 16 {
		t.Fatalf("-spares.procs=%d: want at least 16", n)
	}
	j := startProcsJob(t, n)
	j.waitAll("first view", func(l string) bool { return l == "view 1 running" })
	time.Sleep(5 * time.Second) // real processes: let the tree settle before counting sockets
	j.logSockets()
	j.killRankHolder()
	j.finishAndShutdown()
}

// procsJob is the job of TestProcsKillRankHolder: its table, its child
// processes and what they print.
type procsJob struct {
	t        *testing.T
	tab      childTable
	initial  state
	children []*child
	events   chan childEvent
	readers  sync.WaitGroup
	alive    map[uint32]bool
	deadline <-chan time.Time
}

// startProcsJob starts n processes (8 of them spares) on 16 host labels,
// each on its two loopback listeners, with every process alive.
func startProcsJob(t *testing.T, n int) *procsJob {
	const spares, hosts = 8, 16
	tab, lns := procsTable(t, n, spares, hosts)
	b, _ := json.Marshal(tab)
	table := filepath.Join(t.TempDir(), "table.json")
	if err := os.WriteFile(table, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j := &procsJob{t: t, tab: tab, events: make(chan childEvent, 4*n), children: make([]*child, n), alive: map[uint32]bool{}}
	t.Cleanup(func() {
		for _, c := range j.children {
			if c != nil && c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	})
	start := time.Now()
	for i := range j.children {
		j.startChild(uint32(i), lns[i], table)
	}
	t.Logf("%d processes started in %v", n, time.Since(start).Round(time.Millisecond))
	j.deadline = time.After(5 * time.Minute)
	for i := range n {
		j.alive[uint32(i)] = true
	}
	var err error
	if j.initial, err = initialState(tab.Members, tab.NumRanks, false, 0, DefaultConfig().MaxVoters); err != nil {
		t.Fatal(err)
	}
	return j
}

// procsTable is the member table of n processes, the last spares of them
// spares, with the Raft and control listeners of each.
func procsTable(t *testing.T, n, spares, hosts int) (childTable, [][2]*net.TCPListener) {
	tab := childTable{NumRanks: n - spares, Token: auth.NewToken()}
	lns := make([][2]*net.TCPListener, n)
	for i := range lns {
		for j := range 2 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lns[i][j] = ln.(*net.TCPListener)
		}
		tab.Members = append(tab.Members, Member{
			Proc: uint32(i), Host: fmt.Sprintf("h%d", i%hosts), Addr: fmt.Sprintf("data-%d", i),
			RaftAddr: lns[i][0].Addr().String(), CtlAddr: lns[i][1].Addr().String(), Spare: i >= n-spares,
		})
	}
	return tab, lns
}

// startChild starts process p (the test binary again) on its listeners
// lns and the table at table, and passes what it prints on to j.events.
func (j *procsJob) startChild(p uint32, lns [2]*net.TCPListener, table string) {
	var files []*os.File
	for _, ln := range lns {
		f, err := ln.File()
		if err != nil {
			j.t.Fatal(err)
		}
		files = append(files, f)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(int(p)), childEnv+"_TABLE="+table, "GOMAXPROCS=1")
	if *procsAllRaft {
		cmd.Env = append(cmd.Env, childEnv+"_ALLRAFT=1")
	}
	cmd.ExtraFiles = files
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		j.t.Fatalf("start proc %d: %v", p, err)
	}
	for i, f := range files {
		f.Close()
		lns[i].Close()
	}
	j.children[p] = &child{proc: p, cmd: cmd, stdin: stdin}
	j.readers.Add(1)
	go func() {
		defer j.readers.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			j.events <- childEvent{p, sc.Text()}
		}
	}()
}

// waitAll waits until every live process printed a line with want.
func (j *procsJob) waitAll(what string, want func(line string) bool) {
	j.t.Helper()
	done := map[uint32]bool{}
	for len(done) < len(j.alive) {
		select {
		case e := <-j.events:
			switch {
			case strings.HasPrefix(e.line, "error") || strings.HasPrefix(e.line, "lost"):
				j.t.Fatalf("proc %d: %s", e.proc, e.line)
			case j.alive[e.proc] && want(e.line):
				done[e.proc] = true
			}
		case <-j.deadline:
			j.t.Fatalf("%s: %d of %d processes after the deadline", what, len(done), len(j.alive))
		}
	}
}

// logSockets logs the sockets each process holds: the median, the most
// and the voters'.
func (j *procsJob) logSockets() {
	socks := map[uint32]int{}
	for _, c := range j.children {
		socks[c.proc] = sockets(c.cmd.Process.Pid)
	}
	counts := slices.Collect(func(yield func(int) bool) {
		for _, s := range socks {
			if !yield(s) {
				return
			}
		}
	})
	slices.Sort(counts)
	var voterSocks []int
	for _, v := range j.initial.Voters {
		voterSocks = append(voterSocks, socks[v])
	}
	j.t.Logf("sockets per process (listeners included): median %d, max %d; the voters %v", counts[len(counts)/2], counts[len(counts)-1], voterSocks)
}

// killRankHolder SIGKILLs a client that holds a rank, has a child of its
// own report it, and waits until every survivor is at epoch 2.
func (j *procsJob) killRankHolder() {
	tr := newTree(&j.initial, DefaultConfig().TreeFanout)
	// The first client with children (its first child reports), or the
	// first client (the last one reports) in a job too small for that.
	clients := tr.Clients()
	victim, kid := clients[0], clients[len(clients)-1]
	for _, p := range clients {
		if ch := tr.Children(p); len(ch) > 0 {
			victim, kid = p, ch[0]
			break
		}
	}
	_ = j.children[victim].cmd.Process.Signal(syscall.SIGKILL)
	_ = j.children[victim].cmd.Wait()
	delete(j.alive, victim)
	killed := time.Now()
	fmt.Fprintf(j.children[kid].stdin, "report %d 1\n", victim)
	j.waitAll("epoch 2", func(l string) bool { return l == "view 2 running" })
	j.t.Logf("rank holder %d SIGKILLed; its child %d reported it; every one of %d survivors at epoch 2 after %v",
		victim, kid, len(j.alive), time.Since(killed).Round(time.Millisecond))
}

// finishAndShutdown has the last process finish the job, then shuts
// every survivor down and checks that only the voters ran Raft (in the
// voters-only mode).
func (j *procsJob) finishAndShutdown() {
	fmt.Fprintf(j.children[len(j.children)-1].stdin, "finish\n")
	j.waitAll("finished", func(l string) bool { return strings.HasSuffix(l, " finished") && strings.HasPrefix(l, "view ") })
	stopping := time.Now()
	for p := range j.alive {
		j.children[p].stdin.Close()
	}
	var stats []string
	j.waitAll("shutdown", func(l string) bool {
		if strings.HasPrefix(l, "stats raft=true") {
			stats = append(stats, l)
		}
		return strings.HasPrefix(l, "stats ")
	})
	for p := range j.alive {
		if err := j.children[p].cmd.Wait(); err != nil {
			j.t.Errorf("proc %d: %v", p, err)
		}
	}
	j.readers.Wait()
	j.t.Logf("every process shut down %v after the request; the ones that ran raft: %v", time.Since(stopping).Round(time.Millisecond), stats)
	if !*procsAllRaft && len(stats) != len(j.initial.Voters) {
		j.t.Errorf("%d processes ran raft, want the %d voters", len(stats), len(j.initial.Voters))
	}
}

// sockets counts the sockets a process holds open.
func sockets(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	k := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			k++
		}
	}
	return k
}
