package remote

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The test binary doubles as the remote side ("--remote-exec") and as the
// program it runs, selected by roleVar: "pidsleeper" prints its pid and
// sleeps, "partial" prints a line without its newline and exits 3.
const (
	roleVar = "GASPIRUN_TEST_ROLE"
	// noRaceExitDelay keeps children built with -race from sleeping a
	// second at exit.
	noRaceExitDelay = "GORACE=atexit_sleep_ms=0"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--remote-exec" {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // as gaspirun's main
		os.Exit(Exec(os.Stdin, os.Stdout, os.Stderr))
	}
	switch os.Getenv(roleVar) {
	case "pidsleeper":
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(time.Hour)
		os.Exit(0)
	case "partial":
		fmt.Print("no newline at the end")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestExecByHand: run without gaspirun on its stdin, the remote side
// says what it is for and exits.
func TestExecByHand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--remote-exec")
	cmd.Stdin = strings.NewReader("ls\n")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "this mode is for gaspirun --hostfile") {
		t.Fatalf("exit %v: %s", err, out)
	}
}

// remoteExec runs this test binary as gaspirun --remote-exec with h on its
// stdin, then control, and returns its stdin (still open), its stdout
// lines as they come, and its stderr, to be read once it has ended.
func remoteExec(t *testing.T, h *Header, control string) (stdin io.WriteCloser, lines <-chan string, stderr *bytes.Buffer, done <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--remote-exec")
	cmd.Env = append(os.Environ(), noRaceExitDelay)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errs := &bytes.Buffer{}
	cmd.Stderr = errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hdr, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	in.Write(append(hdr, control...))
	lc := make(chan string, 16)
	dc := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lc <- sc.Text()
		}
		close(lc)
		dc <- cmd.Wait()
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
	})
	return in, lc, errs, dc
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("stdout ended")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no line on stdout")
	}
	return ""
}

// TestExecLifelines: the remote side ends its program when gaspirun
// says so, when its stdin ends, and when gaspirun's pings stop; and it
// reports how the program ended on a status line of its own.
func TestExecLifelines(t *testing.T) {
	header := func(role string, ping time.Duration) *Header {
		return &Header{Proc: 1, Host: "h1", Nonce: "n1", Program: os.Args[0],
			Env: []string{roleVar + "=" + role, noRaceExitDelay}, RanksOnHost: 1, PingTimeout: ping, Grace: time.Second}
	}
	cases := []struct {
		name    string
		ping    time.Duration
		act     func(in io.WriteCloser)
		status  string
		message string
	}{
		{"signal", 0, func(in io.WriteCloser) { io.WriteString(in, "ping\nsignal 15\n") }, StatusMark + "n1 signal 15", ""},
		{"stdin ends", 0, func(in io.WriteCloser) { in.Close() }, StatusMark + "n1 signal 9", ""},
		{"pings stop", time.Second, nil, StatusMark + "n1 signal 9", "no word from gaspirun for 1s; killing process 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, lines, errs, done := remoteExec(t, header("pidsleeper", c.ping), "")
			if c.act == nil {
				// Ping until the program is up, then stop.
				stop := make(chan struct{})
				c.act = func(io.WriteCloser) { close(stop) }
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(100 * time.Millisecond):
							io.WriteString(in, "ping\n")
						}
					}
				}()
			}
			var pid int
			if _, err := fmt.Sscanf(nextLine(t, lines), "pid %d", &pid); err != nil {
				t.Fatal(err)
			}
			c.act(in)
			if l := nextLine(t, lines); l != c.status {
				t.Fatalf("status %q, want %q", l, c.status)
			}
			<-done
			if left := proctest.WaitGone([]int{pid}, 10*time.Second); len(left) > 0 {
				t.Fatalf("process %d is still running", pid)
			}
			if !strings.Contains(errs.String(), c.message) {
				t.Errorf("stderr %q lacks %q", errs, c.message)
			}
		})
	}
	t.Run("exit code and partial line", func(t *testing.T) {
		_, lines, _, done := remoteExec(t, header("partial", 0), "")
		if l := nextLine(t, lines); l != "no newline at the end" {
			t.Fatalf("got %q", l)
		}
		if l := nextLine(t, lines); l != StatusMark+"n1 exit 3" {
			t.Fatalf("status %q", l)
		}
		if err := <-done; err == nil || err.(*exec.ExitError).ExitCode() != 3 {
			t.Errorf("remote side ended with %v, want exit 3", err)
		}
	})
	t.Run("no such program", func(t *testing.T) {
		h := header("child", 0)
		h.Program = "/nonexistent/prog"
		_, lines, errs, done := remoteExec(t, h, "")
		if l := nextLine(t, lines); l != StatusMark+"n1 exit 127" {
			t.Fatalf("status %q", l)
		}
		// The status line can arrive before the message on stderr has
		// been copied: read stderr once the remote side has ended.
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the remote side did not end")
		}
		if !strings.Contains(errs.String(), "gaspirun --remote-exec on h1: cannot start process 1") {
			t.Errorf("stderr %q", errs)
		}
	})
}
