package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeExit makes the test binary a stand-in program (TestMain): it exits
// with the code in the variable, or 5 when PGAS_JOIN is not 1; "wait"
// waits for SIGTERM and then dies of it.
const fakeExit = "GASPIPOD_TEST_EXIT"

// readyFile is the file the stand-in program creates once it runs, when
// it waits for SIGTERM.
const readyFile = "GASPIPOD_TEST_READY"

// asGaspipod makes the test binary gaspipod itself, with itself as the
// program (TestMain).
const asGaspipod = "GASPIPOD_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asGaspipod) == "1" {
		os.Unsetenv(asGaspipod)
		os.Exit(run([]string{os.Args[0]}, os.LookupEnv))
	}
	if v, ok := os.LookupEnv(fakeExit); ok {
		if os.Getenv(varJoin) != "1" && v != "wait-own" {
			os.Exit(5)
		}
		if v == "wait" || v == "wait-own" {
			os.WriteFile(os.Getenv(readyFile), nil, 0o600)
			time.Sleep(time.Minute) // the default action of SIGTERM ends it
			os.Exit(6)
		}
		code, _ := strconv.Atoi(v)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		join bool
		want string // in the reason or the error
		bad  bool
	}{
		{env: nil},
		{env: map[string]string{varFailures: "", varIgnoredFailures: " "}},
		{env: map[string]string{varFailures: "0", varIgnoredFailures: "0"}},
		{env: map[string]string{varFailures: "1", varIndex: "3"}, join: true, want: "index 3 was started before (1 failed, 0 ignored pods): a spare holds its rank; this pod joins the running job as a new spare (PGAS_JOIN=1)"},
		{env: map[string]string{varIgnoredFailures: "2"}, join: true, want: "index ? was started before (0 failed, 2 ignored pods)"},
		{env: map[string]string{varFailures: "x"}, bad: true, want: `GASPIPOD_INDEX_FAILURES="x" is not a count`},
		{env: map[string]string{varIgnoredFailures: "-1"}, bad: true, want: "GASPIPOD_INDEX_IGNORED_FAILURES"},
	} {
		d, err := decide(lookupOf(tc.env))
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: err %v, want one containing %q", tc.env, err, tc.want)
			}
			continue
		}
		if err != nil || d.join != tc.join || !strings.Contains(d.why, tc.want) {
			t.Errorf("%v: %+v, %v; want join=%v and a reason containing %q", tc.env, d, err, tc.join, tc.want)
		}
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"--"}, {"--help"}} {
		if code := run(args, lookupOf(nil)); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
	for _, env := range []map[string]string{nil, {varFailures: "1"}} {
		if code := run([]string{"--", "/nonexistent/gaspipod-test"}, lookupOf(env)); code != 127 {
			t.Errorf("a missing program (%v): exit %d, want 127", env, code)
		}
	}
	if code := run([]string{"prog"}, lookupOf(map[string]string{varFailures: "many"})); code != 2 {
		t.Errorf("a malformed count: exit %d, want 2", code)
	}
}

// A replacement pod runs its program with PGAS_JOIN=1 and ends with its
// exit code, except that a joiner that found no job (69) is a pod not
// needed: 0.
func TestReplacementJoins(t *testing.T) {
	replacement := lookupOf(map[string]string{varFailures: "1", varIndex: "2"})
	for _, c := range []struct{ prog, want int }{{0, 0}, {3, 3}, {exitCannotJoin, 0}, {77, 77}} {
		t.Setenv(fakeExit, strconv.Itoa(c.prog))
		if code := run([]string{os.Args[0]}, replacement); code != c.want {
			t.Errorf("the program exited %d: gaspipod exited %d, want %d (5: PGAS_JOIN was not 1)", c.prog, code, c.want)
		}
	}
}

// A replacement pod passes the kubelet's SIGTERM on to its program and
// reports its death as a shell would, 143.
func TestReplacementForwardsSIGTERM(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	ready := filepath.Join(t.TempDir(), "ready")
	cmd.Env = append(os.Environ(), asGaspipod+"=1", varFailures+"=1", fakeExit+"=wait", readyFile+"="+ready)
	sigtermReaches(t, cmd, ready)
}

// One of the job's own pods, where gaspipod is the container's first
// process (pid 1 of a PID namespace of its own, as in a container): the
// kubelet's SIGTERM reaches the program, which dies of it, and gaspipod
// exits 143. Put in gaspipod's place, a program that does not catch
// SIGTERM (this test's fake) exited 2: the kernel does not kill a
// namespace's first process with a signal's default action, and Go's
// runtime then exits 2, which the Job's podFailurePolicy fails the Job on.
func TestFirstProcessForwardsSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace of its own needs root")
	}
	cmd := exec.Command(os.Args[0])
	ready := filepath.Join(t.TempDir(), "ready")
	cmd.Env = append(os.Environ(), asGaspipod+"=1", fakeExit+"=wait-own", readyFile+"="+ready)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	sigtermReaches(t, cmd, ready)
}

// sigtermReaches starts cmd (gaspipod over the fake program), waits until
// the program runs, sends gaspipod SIGTERM, and expects exit 143 within
// 30 s.
func sigtermReaches(t *testing.T, cmd *exec.Cmd, ready string) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The signal goes to gaspipod once its program runs: to gaspipod
	// alone, as the kubelet's reaches the container's first process.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a real process: poll with a deadline
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the program under gaspipod did not start within 30s")
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 128+int(syscall.SIGTERM) {
			t.Fatalf("gaspipod exited %d (%v), want 143: its program died of the forwarded SIGTERM", code, err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gaspipod still ran 30s after SIGTERM: the signal was not passed on")
	}
}

// A replacement's environment: PGAS_JOIN=1 once, and the rendezvous wait
// cut to joinWait unless it was shorter.
func TestJoinerEnv(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"A=1", "PGAS_RENDEZVOUS_TIMEOUT=10m", "PGAS_JOIN=0"}, "A=1 PGAS_JOIN=1 PGAS_RENDEZVOUS_TIMEOUT=30s"},
		{[]string{"PGAS_RENDEZVOUS_TIMEOUT=5s"}, "PGAS_JOIN=1 PGAS_RENDEZVOUS_TIMEOUT=5s"},
		{[]string{"PGAS_RENDEZVOUS_TIMEOUT=12"}, "PGAS_JOIN=1 PGAS_RENDEZVOUS_TIMEOUT=12s"},
		{nil, "PGAS_JOIN=1 PGAS_RENDEZVOUS_TIMEOUT=30s"},
	} {
		if got := strings.Join(joinerEnv(c.in), " "); got != c.want {
			t.Errorf("joinerEnv(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
