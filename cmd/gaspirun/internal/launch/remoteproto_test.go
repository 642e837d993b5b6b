package launch

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatusLine(t *testing.T) {
	for _, ex := range []exitInfo{{Code: 0}, {Code: 77}, {Code: 255}, {Code: -1, Signal: syscall.SIGKILL}} {
		line := statusLine("n0", ex)
		got, ok := parseStatus(strings.TrimSuffix(line, "\n"), "n0")
		if !ok || got != ex {
			t.Errorf("%v: %q parsed as %v, %v", ex, line, got, ok)
		}
		if _, ok := parseStatus(strings.TrimSuffix(line, "\n"), "other"); ok {
			t.Errorf("%q accepted for another nonce", line)
		}
	}
	for _, bad := range []string{statusMark + "n0 exit", statusMark + "n0 exit 256", statusMark + "n0 signal 0", statusMark + "n0 quit 1", "exit 0"} {
		if ex, ok := parseStatus(bad, "n0"); ok {
			t.Errorf("%q parsed as %v", bad, ex)
		}
	}
}

func TestRemoteHeader(t *testing.T) {
	h := &remoteHeader{Proc: 3, Host: "h", Nonce: "n", Program: "/bin/x", Args: []string{"a b", "'c'"},
		Env: []string{"PGAS_TOKEN=abc", "X=line1\nline2"}, RanksOnHost: 2, PingTimeout: time.Second}
	b, err := h.encode()
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(append(b, "ping\n"...)))
	got, err := readHeader(r)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if rest, _ := r.ReadString('\n'); rest != "ping\n" {
		t.Errorf("control line after the header: %q", rest)
	}
	for in, want := range map[string]string{
		"":                          "no header on stdin",
		"hello\n":                   "does not start with",
		remoteMagic + "\n{bad\n":    "bad header",
		remoteMagic + "\n{}\n":      "no program or nonce",
		remoteMagic + "\n{\"a\":1}": "unexpected EOF",
	} {
		if _, err := readHeader(bufio.NewReader(strings.NewReader(in))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// TestRemoteExecByHand: run without gaspirun on its stdin, the remote side
// says what it is for and exits.
func TestRemoteExecByHand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--remote-exec")
	cmd.Stdin = strings.NewReader("ls\n")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "this mode is for gaspirun --hostfile") {
		t.Fatalf("exit %v: %s", err, out)
	}
}

func TestSplitCommandAndShellJoin(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"ssh", []string{"ssh"}},
		{"  ssh -p 2222\t-i key ", []string{"ssh", "-p", "2222", "-i", "key"}},
		{`ssh -i "my key" -o 'ProxyJump=a b'`, []string{"ssh", "-i", "my key", "-o", "ProxyJump=a b"}},
		{`a\ b "x\"y" ''`, []string{"a b", `x"y`, ""}},
	}
	for _, c := range cases {
		got, err := SplitCommand(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`ssh "x`, `ssh 'x`} {
		if _, err := SplitCommand(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// shellJoin survives a real shell, whatever the bytes.
	args := []string{"plain", "with space", "it's", `"dq"`, "$HOME", "a;b", "", "*", "ü"}
	out, err := exec.Command("/bin/sh", "-c", "printf '%s\\n' "+shellJoin(args)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !reflect.DeepEqual(got, args) {
		t.Errorf("shell saw %q, want %q", got, args)
	}
}

func TestMergeEnviron(t *testing.T) {
	got := mergeEnviron([]string{"PATH=/bin", "PGAS_TOKEN=stale", "PGAS_LOG=debug"}, []string{"PGAS_PROC=1"}, 8, 2)
	want := []string{"PATH=/bin", "PGAS_LOG=debug", "GOMAXPROCS=4", "PGAS_PROC=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got = mergeEnviron([]string{"GOMAXPROCS=3"}, nil, 8, 2)
	if !reflect.DeepEqual(got, []string{"GOMAXPROCS=3"}) {
		t.Errorf("user GOMAXPROCS: %q", got)
	}
	if got := forwardedEnv([]string{"HOME=/root", "PGAS_LOG=debug", "PGAS_TOKEN=x", "GODEBUG=a=1", "SSH_AUTH_SOCK=/s"}); !reflect.DeepEqual(got, []string{"PGAS_LOG=debug", "GODEBUG=a=1"}) {
		t.Errorf("forwarded %q", got)
	}
}

// remoteExec runs this test binary as gaspirun --remote-exec with h on its
// stdin, then control, and returns its stdin (still open), its stdout
// lines and its stderr as they come.
func remoteExec(t *testing.T, h *remoteHeader, control string) (stdin io.WriteCloser, lines <-chan string, stderr *watchBuffer, done <-chan error) {
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
	errs := newWatchBuffer()
	cmd.Stderr = errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hdr, err := h.encode()
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

// TestRemoteExecLifelines: the remote side ends its program when gaspirun
// says so, when its stdin ends, and when gaspirun's pings stop; and it
// reports how the program ended on a status line of its own.
func TestRemoteExecLifelines(t *testing.T) {
	header := func(role string, ping time.Duration) *remoteHeader {
		return &remoteHeader{Proc: 1, Host: "h1", Nonce: "n1", Program: os.Args[0],
			Env: []string{roleVar + "=" + role, noRaceExitDelay}, RanksOnHost: 1, PingTimeout: ping, Grace: time.Second}
	}
	cases := []struct {
		name    string
		ping    time.Duration
		act     func(in io.WriteCloser)
		status  string
		message string
	}{
		{"signal", 0, func(in io.WriteCloser) { io.WriteString(in, "ping\nsignal 15\n") }, statusMark + "n1 signal 15", ""},
		{"stdin ends", 0, func(in io.WriteCloser) { in.Close() }, statusMark + "n1 signal 9", ""},
		{"pings stop", time.Second, nil, statusMark + "n1 signal 9", "no word from gaspirun for 1s; killing process 1"},
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
			waitGone(t, []int{pid})
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
		if l := nextLine(t, lines); l != statusMark+"n1 exit 3" {
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
		if l := nextLine(t, lines); l != statusMark+"n1 exit 127" {
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
