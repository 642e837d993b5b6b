package remote

import (
	"bufio"
	"bytes"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatusLine(t *testing.T) {
	for _, ex := range []Status{{Code: 0}, {Code: 77}, {Code: 255}, {Code: -1, Signal: syscall.SIGKILL}} {
		line := StatusLine("n0", ex)
		got, ok := ParseStatus(strings.TrimSuffix(line, "\n"), "n0")
		if !ok || got != ex {
			t.Errorf("%v: %q parsed as %v, %v", ex, line, got, ok)
		}
		if _, ok := ParseStatus(strings.TrimSuffix(line, "\n"), "other"); ok {
			t.Errorf("%q accepted for another nonce", line)
		}
	}
	for _, bad := range []string{StatusMark + "n0 exit", StatusMark + "n0 exit 256", StatusMark + "n0 signal 0", StatusMark + "n0 quit 1", "exit 0"} {
		if ex, ok := ParseStatus(bad, "n0"); ok {
			t.Errorf("%q parsed as %v", bad, ex)
		}
	}
}

func TestRemoteHeader(t *testing.T) {
	h := &Header{Proc: 3, Host: "h", Nonce: "n", Program: "/bin/x", Args: []string{"a b", "'c'"},
		Env: []string{"PGAS_TOKEN=abc", "X=line1\nline2"}, RanksOnHost: 2, PingTimeout: time.Second}
	b, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(append(b, "ping\n"...)))
	got, err := ReadHeader(r)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if rest, _ := r.ReadString('\n'); rest != "ping\n" {
		t.Errorf("control line after the header: %q", rest)
	}
	for in, want := range map[string]string{
		"":                    "no header on stdin",
		"hello\n":             "does not start with",
		Magic + "\n{bad\n":    "bad header",
		Magic + "\n{}\n":      "no program or nonce",
		Magic + "\n{\"a\":1}": "unexpected EOF",
	} {
		if _, err := ReadHeader(bufio.NewReader(strings.NewReader(in))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// Rule (protocol.go): "signal N" is for the process at the other end;
// in a step, "signal N LIST" only for the processes of LIST.
func TestParseSignal(t *testing.T) {
	cases := []struct {
		line string
		proc int
		sig  syscall.Signal
		ok   bool
	}{
		{"signal 15", 3, syscall.SIGTERM, true},
		{"signal 9 0-3,7", 7, syscall.SIGKILL, true},
		{"signal 9 0-3,7", 5, 0, false},
		{"signal 15 2", 2, syscall.SIGTERM, true},
		{"signal 0", 1, 0, false},
		{"signal 99", 1, 0, false},
		{"signal 15 3-1", 2, 0, false},
		{"signal 15 1 2", 1, 0, false},
	}
	for _, c := range cases {
		sig, ok := ParseSignal(c.line, c.proc)
		if ok != c.ok || sig != c.sig {
			t.Errorf("ParseSignal(%q, %d) = %v, %v; want %v, %v", c.line, c.proc, sig, ok, c.sig, c.ok)
		}
	}
}

// Rule (a step): every task gets the same header; SLURM_PROCID picks
// its process, host and rank count.
func TestResolveStep(t *testing.T) {
	h := &Header{Proc: -1, Env: []string{"PGAS_NPROCS=3"}, Step: &StepInfo{Hosts: []string{"n1", "n1", "n2"}, RanksOnHost: []int{2, 2, 0}}}
	if err := h.ResolveStep("2"); err != nil {
		t.Fatal(err)
	}
	if h.Proc != 2 || h.Host != "n2" || h.RanksOnHost != 0 || !slices.Equal(h.Env, []string{"PGAS_NPROCS=3", "PGAS_PROC=2", "PGAS_HOST=n2"}) {
		t.Errorf("resolved %+v", h)
	}
	for _, bad := range []string{"", "3", "-1", "x"} {
		h := &Header{Proc: -1, Step: &StepInfo{Hosts: []string{"n1", "n1", "n2"}, RanksOnHost: []int{2, 2, 0}}}
		if err := h.ResolveStep(bad); err == nil {
			t.Errorf("SLURM_PROCID=%q accepted", bad)
		}
	}
}
