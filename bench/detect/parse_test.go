package main

import (
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		line           string
		kind, label    string
		msg            string
		kv             map[string]string
		at             time.Time
		proc, failProc int
	}{
		{
			line: `[r2] time=2026-11-21T07:24:43.585Z level=INFO msg="view applied" proc=4 epoch=2 rank=2 failed=[2]`,
			kind: "log", label: "r2", msg: "view applied",
			kv: map[string]string{"epoch": "2", "rank": "2", "failed": "[2]", "level": "INFO"},
			at: time.Date(2026, 11, 21, 7, 24, 43, 585e6, time.UTC), proc: 4, failProc: -1,
		},
		{
			// The first proc= is the emitting process; quoted values with
			// spaces and escapes.
			line: `[s5] time=2026-11-21T07:24:48.446Z level=WARN msg="failure confirmed" proc=5 failed_proc=1 reason="2 of 2 \"helpers\": 0,3"`,
			kind: "log", label: "s5", msg: "failure confirmed",
			kv: map[string]string{"reason": `2 of 2 "helpers": 0,3`},
			at: time.Date(2026, 11, 21, 7, 24, 48, 446e6, time.UTC), proc: 5, failProc: 1,
		},
		{
			line: `[s7] time=2026-11-21T07:27:48.289Z level=INFO msg="health: suspected" proc=7 peer=0 tick=786`,
			kind: "log", label: "s7", msg: "health: suspected",
			at: time.Date(2026, 11, 21, 7, 27, 48, 289e6, time.UTC), proc: 7, failProc: -1,
		},
		{line: `[r0] pid 4214 proc 0`, kind: "pid", label: "r0", kv: map[string]string{"pid": "4214"}, at: now, proc: 0, failProc: -1},
		{line: `[r3] rank 3 epoch 1`, kind: "init", label: "r3", kv: map[string]string{"rank": "3", "epoch": "1"}, at: now, proc: -1, failProc: -1},
		{line: `[r3] rank 3: step 70 failed (x); recovering`, kind: "rank", label: "r3", at: now, proc: -1, failProc: -1},
		{line: `[r1] result rank=1 sum=30100 epoch=2`, kind: "result", label: "r1", kv: map[string]string{"sum": "30100", "epoch": "2"}, at: now, proc: -1, failProc: -1},
		{line: `[r0] leader proc=0 epoch=1`, kind: "leader", label: "r0", at: now, proc: 0, failProc: -1},
		{line: `gaspirun: spare process 4 now holds rank 2 (epoch 2)`, kind: "gaspirun", at: now, proc: -1, failProc: -1},
		{line: `[r1] time=garbage msg="x`, kind: "log", label: "r1", msg: `"x`, at: now, proc: -1, failProc: -1},
		{line: ``, kind: "", at: now, proc: -1, failProc: -1},
	}
	for _, c := range cases {
		r := parseLine(c.line, now)
		if r.kind != c.kind || r.label != c.label || r.msg != c.msg || !r.at.Equal(c.at) {
			t.Errorf("%q: kind %q label %q msg %q at %v, want %q %q %q %v", c.line, r.kind, r.label, r.msg, r.at, c.kind, c.label, c.msg, c.at)
		}
		for k, v := range c.kv {
			if r.kv[k] != v {
				t.Errorf("%q: %s=%q, want %q", c.line, k, r.kv[k], v)
			}
		}
		if r.proc() != c.proc || int(r.int("failed_proc")) != c.failProc {
			t.Errorf("%q: proc %d failed_proc %d, want %d %d", c.line, r.proc(), r.int("failed_proc"), c.proc, c.failProc)
		}
	}
}

func TestExpectedSum(t *testing.T) {
	// The figures the runtime's docs quote: 4 ranks, 100 steps.
	if got := expectedSum(4, 100); got != 30100 {
		t.Fatalf("expectedSum(4, 100) = %d, want 30100", got)
	}
	// Against the loop it abbreviates.
	for n := int64(1); n <= 6; n++ {
		for s := int64(0); s <= 50; s += 7 {
			var want int64
			for i := int64(0); i < s; i++ {
				for r := int64(0); r < n; r++ {
					want += r*i + 1
				}
			}
			if got := expectedSum(n, s); got != want {
				t.Errorf("expectedSum(%d, %d) = %d, want %d", n, s, got, want)
			}
		}
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := quantiles(ds); got != "50 / 90 / 99 / 100" {
		t.Fatalf("quantiles(1..100ms) = %q", got)
	}
	if got := quantiles(nil); got != "-" {
		t.Fatalf("quantiles(nil) = %q", got)
	}
}
