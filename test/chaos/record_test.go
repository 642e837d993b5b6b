package chaos

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// Rule: the Raft leader is read from the membership's record by key,
// whatever the order of its attributes, in slog's text and JSON forms,
// with or without a role prefix.
func TestLeaderOf(t *testing.T) {
	for _, c := range []struct {
		line string
		proc int
		ok   bool
	}{
		// The record as the processes print it now (job adds layer, then
		// spares adds proc), and as it was printed before.
		{`[r0] time=2026-11-28T20:48:37.377Z level=INFO msg="spares: became raft leader" layer=membership proc=0 epoch=1`, 0, true},
		{`[s5] time=2026-11-28T20:48:37.377Z level=INFO msg="spares: became raft leader" proc=5 epoch=3`, 5, true},
		{`[p2] time=x level=INFO msg="spares: became raft leader" epoch=2 layer=membership proc=2`, 2, true},
		{`time=x level=INFO msg="spares: became raft leader" proc=4 layer=membership epoch=1`, 4, true},
		{`[r1] {"time":"x","level":"INFO","msg":"spares: became raft leader","layer":"membership","proc":1,"epoch":1}`, 1, true},
		{`[r0-3] {"msg":"spares: became raft leader","proc":3}`, 3, true},
		// Not the leader record.
		{`[r0] time=x level=INFO msg="view applied" proc=0 epoch=1 rank=0`, -1, false},
		{`[r0] time=x level=INFO msg="spares: became raft leader" layer=membership epoch=1`, -1, false},
		{`[r0] inject: kill:leader after iteration 3: the Raft leader is process 5, which holds no rank (an idle spare); nothing killed`, -1, false},
		{`[r0] note="msg=\"spares: became raft leader\" proc=1"`, -1, false},
		{`chaos: applied kill-leader rank=1 at=8: SIGKILL raft leader process 0`, -1, false},
	} {
		p, ok := LeaderOf(c.line)
		if ok != c.ok || (ok && p != c.proc) {
			t.Errorf("LeaderOf(%q) = %d, %v; want %d, %v", c.line, p, ok, c.proc, c.ok)
		}
	}
}

// Rule: what slog writes for the membership's record, through the
// loggers job and spares build (With layer, then With proc), is read back
// whole, in either of slog's forms.
func TestParseRecordOfSlog(t *testing.T) {
	for _, form := range []string{"text", "json"} {
		var buf bytes.Buffer
		h := slog.Handler(slog.NewTextHandler(&buf, nil))
		if form == "json" {
			h = slog.NewJSONHandler(&buf, nil)
		}
		slog.New(h).With("layer", "membership").With("proc", 7).Info(msgBecameLeader, "epoch", 12)
		line := "[s7] " + strings.TrimSpace(buf.String())
		r, ok := ParseRecord(line)
		if !ok || r.Msg() != msgBecameLeader || r["proc"] != "7" || r["epoch"] != "12" || r["layer"] != "membership" {
			t.Errorf("%s: ParseRecord(%q) = %v, %v", form, line, r, ok)
		}
		if p, ok := LeaderOf(line); !ok || p != 7 {
			t.Errorf("%s: LeaderOf(%q) = %d, %v; want 7", form, line, p, ok)
		}
	}
}

// Rule: the harness learns the leader from the job's lines as they come,
// and forgets it when the membership commits its failure.
func TestJobLearnsLeader(t *testing.T) {
	j := &job{leader: -1, failed: map[int]bool{}}
	feed := func(s string) { j.onLine(proctest.Line{Text: s, Time: time.Now()}) }
	feed(`[r0] time=x level=INFO msg="view applied" proc=0 epoch=1 rank=0 failed=[] moved=[] table=835b3dad`)
	if j.leader != -1 {
		t.Fatalf("leader %d before any election", j.leader)
	}
	feed(`[s5] time=x level=INFO msg="spares: became raft leader" layer=membership proc=5 epoch=1`)
	if j.leader != 5 {
		t.Fatalf("leader %d, want 5", j.leader)
	}
	feed(`[r1] time=x level=INFO msg="spares: failure committed" layer=membership proc=1 epoch=2 status=ok note="" failed_proc=3 reporter=1`)
	if j.leader != 5 {
		t.Fatalf("leader %d after another process's failure, want 5", j.leader)
	}
	feed(`[r1] time=x level=INFO msg="spares: failure committed" layer=membership proc=1 epoch=3 status=ok note="" failed_proc=5 reporter=1`)
	if j.leader != -1 {
		t.Fatalf("leader %d after its failure was committed, want none", j.leader)
	}
	feed(`[r2] time=x level=INFO msg="spares: became raft leader" layer=membership proc=2 epoch=3`)
	if j.leader != 2 {
		t.Fatalf("leader %d, want 2", j.leader)
	}
}
