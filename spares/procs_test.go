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
	const spares, hosts = 8, 16
	dir := t.TempDir()
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
	b, _ := json.Marshal(tab)
	table := filepath.Join(dir, "table.json")
	if err := os.WriteFile(table, b, 0o600); err != nil {
		t.Fatal(err)
	}
	events := make(chan childEvent, 4*n)
	children := make([]*child, n)
	var readers sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range children {
			if c != nil && c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	})
	start := time.Now()
	for i := range children {
		var files []*os.File
		for _, ln := range lns[i] {
			f, err := ln.File()
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(i), childEnv+"_TABLE="+table, "GOMAXPROCS=1")
		if *procsAllRaft {
			cmd.Env = append(cmd.Env, childEnv+"_ALLRAFT=1")
		}
		cmd.ExtraFiles = files
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start proc %d: %v", i, err)
		}
		for j, f := range files {
			f.Close()
			lns[i][j].Close()
		}
		children[i] = &child{proc: uint32(i), cmd: cmd, stdin: stdin}
		readers.Add(1)
		go func(p uint32) {
			defer readers.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				events <- childEvent{p, sc.Text()}
			}
		}(uint32(i))
	}
	t.Logf("%d processes started in %v", n, time.Since(start).Round(time.Millisecond))

	deadline := time.After(5 * time.Minute)
	alive := map[uint32]bool{}
	for i := range n {
		alive[uint32(i)] = true
	}
	// waitAll waits until every live process printed a line with want.
	waitAll := func(what string, want func(line string) bool) {
		t.Helper()
		done := map[uint32]bool{}
		for len(done) < len(alive) {
			select {
			case e := <-events:
				switch {
				case strings.HasPrefix(e.line, "error") || strings.HasPrefix(e.line, "lost"):
					t.Fatalf("proc %d: %s", e.proc, e.line)
				case alive[e.proc] && want(e.line):
					done[e.proc] = true
				}
			case <-deadline:
				t.Fatalf("%s: %d of %d processes after the deadline", what, len(done), len(alive))
			}
		}
	}
	initial, err := initialState(tab.Members, tab.NumRanks, false, 0, DefaultConfig().MaxVoters)
	if err != nil {
		t.Fatal(err)
	}
	waitAll("first view", func(l string) bool { return l == "view 1 running" })
	time.Sleep(5 * time.Second) // real processes: let the tree settle before counting sockets
	socks := map[uint32]int{}
	for _, c := range children {
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
	for _, v := range initial.Voters {
		voterSocks = append(voterSocks, socks[v])
	}
	t.Logf("sockets per process (listeners included): median %d, max %d; the voters %v", counts[len(counts)/2], counts[len(counts)-1], voterSocks)

	tr := newTree(&initial, DefaultConfig().TreeFanout)
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
	_ = children[victim].cmd.Process.Signal(syscall.SIGKILL)
	_ = children[victim].cmd.Wait()
	delete(alive, victim)
	killed := time.Now()
	fmt.Fprintf(children[kid].stdin, "report %d 1\n", victim)
	waitAll("epoch 2", func(l string) bool { return l == "view 2 running" })
	t.Logf("rank holder %d SIGKILLed; its child %d reported it; every one of %d survivors at epoch 2 after %v",
		victim, kid, len(alive), time.Since(killed).Round(time.Millisecond))

	fmt.Fprintf(children[n-1].stdin, "finish\n")
	waitAll("finished", func(l string) bool { return strings.HasSuffix(l, " finished") && strings.HasPrefix(l, "view ") })
	stopping := time.Now()
	for p := range alive {
		children[p].stdin.Close()
	}
	var stats []string
	waitAll("shutdown", func(l string) bool {
		if strings.HasPrefix(l, "stats raft=true") {
			stats = append(stats, l)
		}
		return strings.HasPrefix(l, "stats ")
	})
	for p := range alive {
		if err := children[p].cmd.Wait(); err != nil {
			t.Errorf("proc %d: %v", p, err)
		}
	}
	readers.Wait()
	t.Logf("every process shut down %v after the request; the ones that ran raft: %v", time.Since(stopping).Round(time.Millisecond), stats)
	if !*procsAllRaft && len(stats) != len(initial.Voters) {
		t.Errorf("%d processes ran raft, want the %d voters", len(stats), len(initial.Voters))
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
