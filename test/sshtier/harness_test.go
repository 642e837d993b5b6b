package sshtier

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

const (
	sshdPath = "/usr/sbin/sshd"
	// basePort + i is node(i+1)'s sshd port.
	basePort = 2201
	// jobWait bounds a job from its start to its end, generous for a busy
	// 2-core machine.
	jobWait = 3 * time.Minute
	// endWait bounds the time every process of the job takes to end on
	// every host once the job has ended.
	endWait = 30 * time.Second
	// stepWait bounds the wait for one progress line.
	stepWait = 90 * time.Second
)

// The job: 4 ranks and 2 spares on three hosts of 2 slots.
var (
	workload = []string{"--generate", "100000", "--dim", "8", "--k", "16", "--max-iter", "60", "--ckpt-every", "5"}
	hostfile = "# three simulated hosts\nnode1 slots=2\nnode2 slots=2\nnode3 slots=2\n"
)

var bins struct {
	gaspirun, kmeans string
	err              error
}

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, "sshtier", proctest.Race, []string{"./cmd/gaspirun", "./apps/kmeans/cmd/kmeans"}, func(dir string, skip error) {
		bins.err = skip
		bins.gaspirun = filepath.Join(dir, "gaspirun")
		bins.kmeans = filepath.Join(dir, "kmeans")
	}))
}

var (
	finalRE = regexp.MustCompile(`^\[r0\] (centroids sha256=[0-9a-f]{64} sse=\S+ iterations=\d+)$`)
	iterRE  = regexp.MustCompile(`^\[r0\] iter\s+(\d+)\s`)
)

// require skips the test unless everything it needs is here.
func require(t *testing.T) {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	simhost.Require(t)
	if _, err := os.Stat(sshdPath); err != nil {
		t.Skipf("no %s: the ssh tier needs an OpenSSH server (Debian package openssh-server: apt-get install -y openssh-server)", sshdPath)
	}
	for _, p := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("no %s on PATH: the ssh tier needs the OpenSSH client (Debian package openssh-client)", p)
		}
	}
}

// sshHosts is three simulated hosts, each running an sshd that accepts
// the test's user key.
type sshHosts struct {
	c         *simhost.Cluster
	dir       string // keys, configurations, logs
	sshConfig string // the client configuration: node1..node3 as aliases
	hostfile  string
	sshd      []int // pid of each host's sshd
}

func newSSHHosts(t *testing.T) *sshHosts {
	t.Helper()
	require(t)
	c := simhost.NewForTest(t, simhost.Config{Hosts: 3})
	s := &sshHosts{c: c, dir: t.TempDir()}
	key := func(name string) string {
		p := filepath.Join(s.dir, name)
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		pub, err := os.ReadFile(p + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(pub))
	}
	hostPub, userPub := key("host_key"), key("id")
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(s.dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	authorized := write("authorized_keys", userPub+"\n", 0o600)
	// sshd insists on its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	// Each simulated host has an account database of its own (ip netns
	// exec mounts /etc/netns/NS/passwd over /etc/passwd), where root logs
	// in with /bin/sh and a home of its own: the job must not depend on
	// (nor wait for) this machine's ~/.bashrc, which bash reads for every
	// ssh command.
	home := filepath.Join(s.dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	var accounts strings.Builder
	for _, l := range strings.SplitAfter(string(passwd), "\n") {
		if strings.HasPrefix(l, "root:") {
			l = "root:x:0:0:root:" + home + ":/bin/sh\n"
		}
		accounts.WriteString(l)
	}
	var known, client strings.Builder
	for i, h := range c.Hosts() {
		port := basePort + i
		if err := os.WriteFile(filepath.Join("/etc/netns", h.Namespace(), "passwd"), []byte(accounts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		conf := write(fmt.Sprintf("sshd_config.%s", h.Name()), fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %s
AuthorizedKeysFile %s
PidFile none
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel ERROR
`, port, h.Addr(), filepath.Join(s.dir, "host_key"), authorized), 0o600)
		log, err := os.Create(filepath.Join(s.dir, "sshd."+h.Name()+".log"))
		if err != nil {
			t.Fatal(err)
		}
		// -D: in the foreground, so it is this command; -e: log to stderr.
		cmd := h.Command(context.Background(), sshdPath, "-D", "-e", "-f", conf)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("sshd on %s: %v", h.Name(), err)
		}
		log.Close()
		s.sshd = append(s.sshd, cmd.Process.Pid)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		fmt.Fprintf(&known, "[%s]:%d %s\n", h.Addr(), port, hostPub)
		fmt.Fprintf(&client, "Host %s\n  HostName %s\n  Port %d\n", h.Name(), h.Addr(), port)
	}
	fmt.Fprintf(&client, `Host *
  User root
  IdentityFile %s
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
`, filepath.Join(s.dir, "id"), write("known_hosts", known.String(), 0o600))
	s.sshConfig = write("ssh_config", client.String(), 0o600)
	s.hostfile = write("hostfile", hostfile, 0o644)
	for i, h := range c.Hosts() {
		addr := net.JoinHostPort(h.Addr().String(), strconv.Itoa(basePort+i))
		deadline := time.Now().Add(30 * time.Second)
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(s.dir, "sshd."+h.Name()+".log"))
				t.Fatalf("sshd on %s (%s) does not answer: %v\n%s", h.Name(), addr, err, log)
			}
			time.Sleep(50 * time.Millisecond) // real processes: poll with a deadline
		}
	}
	return s
}

// run is a gaspirun process with its output, line by line.
type run struct {
	*proctest.Job
	cmd *exec.Cmd
}

// gaspirun starts gaspirun with args, then the kmeans program and
// kmArgs.
func gaspirun(t *testing.T, args []string, kmArgs []string) *run {
	t.Helper()
	full := append(append(append([]string{}, args...), "-x", "GOMAXPROCS=1", "--", bins.kmeans), kmArgs...)
	cmd := exec.Command(bins.gaspirun, full...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	j, err := proctest.Start(proctest.JobConfig{}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Kill)
	return &run{Job: j, cmd: cmd}
}

// waitLine waits for a line that match accepts.
func (r *run) waitLine(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	found, err := r.WaitLine(ctx, func(l proctest.Line) bool { return match(l.Text) })
	switch {
	case err == nil:
		return found.Text
	case r.Ended():
		t.Fatalf("gaspirun exited (%d) before %s:\n%s", r.ExitCode(), what, r.output())
	default:
		t.Fatalf("no %s within %v:\n%s", what, stepWait, r.output())
	}
	return ""
}

func (r *run) waitIter(t *testing.T, n int) {
	t.Helper()
	r.waitLine(t, fmt.Sprintf("iteration %d", n), func(l string) bool {
		m := iterRE.FindStringSubmatch(l)
		if m == nil {
			return false
		}
		i, _ := strconv.Atoi(m[1])
		return i >= n
	})
}

// wait waits for gaspirun to exit and returns its exit code.
func (r *run) wait(t *testing.T) int {
	t.Helper()
	if !r.WaitEnd(jobWait) {
		r.Kill()
		t.Fatalf("gaspirun did not end within %v:\n%s", jobWait, r.output())
	}
	return r.ExitCode()
}

// final returns the job's answer, or "".
func (r *run) final() string {
	for _, l := range r.Texts() {
		if m := finalRE.FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	return ""
}

// output is everything gaspirun printed, without the Raft library's
// chatter.
func (r *run) output() string {
	var b strings.Builder
	for _, l := range r.Texts() {
		if !strings.Contains(l, "component=raft") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// baseline caches the failure-free answer of each workload.
var baseline struct {
	mu  sync.Mutex
	ans map[string]string
}

// reference returns the failure-free answer of the K-means arguments
// kmArgs, run once under the local launcher.
func reference(t *testing.T, kmArgs []string) string {
	t.Helper()
	baseline.mu.Lock()
	defer baseline.mu.Unlock()
	key := strings.Join(kmArgs, " ")
	if baseline.ans[key] == "" {
		r := gaspirun(t, []string{"-n", "4", "--spares", "2", "--launcher", "local", "--timeout", "3m"}, kmArgs)
		if code := r.wait(t); code != 0 || r.final() == "" {
			t.Fatalf("the local failure-free job: exit %d, answer %q:\n%s", code, r.final(), r.output())
		}
		if baseline.ans == nil {
			baseline.ans = map[string]string{}
		}
		baseline.ans[key] = r.final()
		t.Logf("failure-free reference: %s", r.final())
	}
	return baseline.ans[key]
}

// jobProcs lists the processes of the job (kmeans, gaspirun
// --remote-exec, sshd sessions) running on host i: everything in its
// namespace but its sshd listener.
func (s *sshHosts) jobProcs(i int) []string {
	pids, _ := s.c.Host(i).PIDs()
	var out []string
	for _, pid := range pids {
		if pid == s.sshd[i] {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue // a zombie its parent has yet to reap
			}
		}
		out = append(out, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")))
	}
	return out
}

// waitHostsClean fails the test unless no process of the job is left on
// any host within endWait.
func (s *sshHosts) waitHostsClean(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(endWait)
	for {
		var left []string
		for i, h := range s.c.Hosts() {
			for _, p := range s.jobProcs(i) {
				left = append(left, h.Name()+": "+p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still running %v after the job's end:\n%s", endWait, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond) // real processes: poll with a deadline
	}
}

// kmeansOn returns the pid of a kmeans process on host i, or 0.
func (s *sshHosts) kmeansOn(i int) int {
	for _, p := range s.jobProcs(i) {
		pid, rest, _ := strings.Cut(p, ": ")
		if strings.HasPrefix(rest, bins.kmeans+" ") {
			n, _ := strconv.Atoi(pid)
			return n
		}
	}
	return 0
}
