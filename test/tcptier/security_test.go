package tcptier

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// Rule (transport/tcp): every connection runs the job-token handshake
// before a single frame is read; one that fails it is refused (closed,
// logged with its remote address, counted) and never produces PeerDown.
//
// Three ranks exchange data in rounds while the test, from outside the
// job, (1) runs the handshake with a wrong token against every rank's
// data-plane listener, claiming a process id that may dial it, (2) sends
// 52 bytes of garbage (a hello's size) to rank 1, (3) sends half a hello
// and hangs up on rank 2, and (4) holds a silent connection to rank 0
// open until the job ends. Every attempt must be refused, each refusal
// must be in the owning rank's log with the attacker's address, the
// runtime must see no rejected frame and no lost peer, and the job must
// finish correctly.
//
// The transport counts what it refuses: each rank prints its
// tcp.Transport Stats after the last round (STATS line). A refusal is
// counted before it is logged (transport/tcp's refuse), and the test
// lets the job finish only once (1)-(3) are all in the logs, so each
// rank's HandshakesRefused is at least the number of those attempts
// aimed at it (rank 0: 1, rank 1: 2, rank 2: 2) and at most the
// refusals it logged (the silent client is refused only if the job
// outlives the handshake timeout, and may be after the line is
// printed). BadFrames, malformed headers from authenticated peers, must
// be 0: no attack gets past the handshake.
func TestForeignConnectionsRefused(t *testing.T) {
	gate := t.TempDir()
	// -v: the runtime's info records too, where a lost peer would show.
	j := startJob(t, []string{"-n", "3", "--grace", "1s", "-v"}, "-case", "secure", "-gate", gate)
	listen := map[int]string{}
	for _, l := range j.waitLines("LISTEN", nil, 3, jobDeadline/2) {
		addrs := strings.Split(l.kv["addr"], ",")
		if len(addrs) != 1 {
			t.Fatalf("rank %s listens on %v; want exactly its data-plane listener", l.kv["rank"], addrs)
		}
		listen[l.int("rank")] = addrs[0]
	}
	j.waitLines("READY", nil, 3, jobDeadline/2)

	type attempt struct {
		rank  int
		local string // the attacker's address, as the rank logs it
		why   string // in the logged error
	}
	var attempts []attempt
	dial := func(rank int) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", listen[rank], 5*time.Second)
		if err != nil {
			t.Fatalf("dial rank %d at %s: %v", rank, listen[rank], err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	// expectClosed reads until the rank closes the connection.
	expectClosed := func(c net.Conn, what string) []byte {
		t.Helper()
		b, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection is still open after 10 s; it must be refused", what)
		}
		return b
	}

	// (1) The protocol, a plausible process id, the wrong token.
	for rank := 0; rank < 3; rank++ {
		claim := uint32(0) // rank 0's process dials ranks 1 and 2
		if rank == 0 {
			claim = 2
		}
		c := dial(rank)
		// With the job's TLS setting (PGAS_TLS=1 runs the tier under TLS),
		// so that the handshake gets as far as the token.
		_, _, err := auth.Dial(c, auth.NewToken(), auth.PurposeData, claim, os.Getenv("PGAS_TLS") == "1")
		if !errors.Is(err, auth.ErrAuth) {
			t.Errorf("handshake with a wrong token at rank %d: %v; want auth.ErrAuth", rank, err)
		}
		expectClosed(c, "wrong token")
		attempts = append(attempts, attempt{rank, c.LocalAddr().String(), "wrong job token"})
		c.Close()
	}
	// (2) Garbage the size of a hello.
	c := dial(1)
	garbage := []byte("GET / HTTP/1.1\r\nHost: example\r\nX-Pad: 0123456789ab\r\n")[:52]
	if _, err := c.Write(garbage); err != nil {
		t.Fatalf("write garbage: %v", err)
	}
	if got := expectClosed(c, "garbage"); !strings.HasPrefix(string(got), "GASPIGO1") {
		t.Errorf("rank 1 answered garbage with %q; want its hello, then the close", got)
	}
	attempts = append(attempts, attempt{1, c.LocalAddr().String(), "bad magic"})
	c.Close()
	// (3) Half a hello, then hang up.
	c = dial(2)
	c.Write([]byte("GASPIGO1data"))
	c.(*net.TCPConn).CloseWrite()
	expectClosed(c, "half a hello")
	attempts = append(attempts, attempt{2, c.LocalAddr().String(), "reading hello"})
	c.Close()
	// The counters are read when the job finishes: wait until every
	// refusal so far is logged (and so counted) first. The processes'
	// stderr has no change signal; poll it, within a generous bound.
	logged := func(a attempt) bool {
		for _, s := range strings.Split(j.stderrText(), "\n") {
			if strings.HasPrefix(s, "[r"+strconv.Itoa(a.rank)+"] ") && strings.Contains(s, "tcp: connection refused") &&
				strings.Contains(s, "remote="+a.local+" ") && strings.Contains(s, a.why) {
				return true
			}
		}
		return false
	}
	for _, a := range attempts {
		for deadline := time.Now().Add(jobDeadline / 3); !logged(a) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	// (4) A silent client must not stall the job.
	silent := dial(0)
	defer silent.Close()

	touch(t, gate, "done")
	if code := j.wait(); code != 0 {
		t.Errorf("gaspirun exited %d, want 0", code)
	}
	j.requirePass("secure", 0, 1, 2)
	for _, l := range j.all("RESULT") {
		t.Logf("rank %s: %s", l.kv["rank"], l.rest)
	}

	// Each refusal is logged by the rank that refused it, with the
	// attacker's address.
	var refusals []string
	for _, s := range strings.Split(j.stderrText(), "\n") {
		if strings.Contains(s, "tcp: connection refused") {
			refusals = append(refusals, s)
		}
	}
	for _, a := range attempts {
		found := false
		for _, s := range refusals {
			if strings.HasPrefix(s, "[r"+strconv.Itoa(a.rank)+"] ") && strings.Contains(s, "remote="+a.local+" ") && strings.Contains(s, a.why) {
				found = true
				t.Logf("refused: %s", s)
			}
		}
		if !found {
			t.Errorf("no refusal logged by rank %d for %s (%s); refusals:\n%s", a.rank, a.local, a.why, strings.Join(refusals, "\n"))
		}
	}
	if len(refusals) > len(attempts)+1 { // +1: the silent client, if the job outlived the handshake timeout
		t.Errorf("%d refusals logged for %d attempts:\n%s", len(refusals), len(attempts), strings.Join(refusals, "\n"))
	}
	// Each rank counted the refusals aimed at it, and nothing more than it
	// logged; no malformed frame got past a handshake.
	want := map[int]int{}
	for _, a := range attempts {
		want[a.rank]++
	}
	stats := j.all("STATS")
	if len(stats) != 3 {
		t.Errorf("%d STATS lines, want one per rank", len(stats))
	}
	for _, l := range stats {
		rank, refused, bad := l.int("rank"), l.int("refused"), l.int("badframes")
		n := 0
		for _, s := range refusals {
			if strings.HasPrefix(s, "[r"+strconv.Itoa(rank)+"] ") {
				n++
			}
		}
		t.Logf("rank %d: HandshakesRefused %d (attempts %d, logged %d), BadFrames %d, Probes %s", rank, refused, want[rank], n, bad, l.kv["probes"])
		if refused < want[rank] || refused > n {
			t.Errorf("rank %d counted %d refusals; %d attempts were aimed at it and it logged %d refusals", rank, refused, want[rank], n)
		}
		if bad != 0 {
			t.Errorf("rank %d counted %d bad frames; want 0", rank, bad)
		}
	}
	if strings.Contains(j.stderrText(), "peer lost") {
		t.Errorf("a rank reported a lost peer")
	}
	j.checkNoRace()
	j.requireGone()
}
