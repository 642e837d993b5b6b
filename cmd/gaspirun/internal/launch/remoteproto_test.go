package launch

import (
	"bufio"
	"bytes"
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
