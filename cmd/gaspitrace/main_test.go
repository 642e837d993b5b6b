package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/obs"
)

// Rule: gaspitrace draws a trace's recovery window to PNG and SVG, and
// refuses a file that is no trace, a trace without a recovery (unless
// --window all) and an unknown picture format, saying what to do.
func TestDraw(t *testing.T) {
	dir := t.TempDir()
	tr := obs.ChromeTrace{TraceEvents: []obs.ChromeEvent{
		{Name: "process_name", Ph: "M", PID: 0, Args: map[string]any{"name": "rank 0 (proc 0)"}},
		{Name: "iteration 1", Cat: "iteration", Ph: "X", TS: 1e6, Dur: 5e4, PID: 0},
		{Name: "failure detection", Cat: "detection", Ph: "X", TS: 1.1e6, Dur: 2e4, PID: 0},
		{Name: "view applied", Cat: "membership", Ph: "i", TS: 1.13e6, PID: 0},
		{Name: "recovery", Cat: "recovery", Ph: "X", TS: 1.12e6, Dur: 9e4, PID: 0},
		{Name: "restore", Cat: "recovery", Ph: "X", TS: 1.14e6, Dur: 7e4, PID: 0},
	}}
	path := filepath.Join(dir, "t.json")
	b, _ := json.Marshal(tr)
	os.WriteFile(path, b, 0o600)
	for _, out := range []string{"r.png", "r.svg"} {
		var stderr bytes.Buffer
		if code := run([]string{"--trace", path, "--out", filepath.Join(dir, out)}, io.Discard, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", out, code, stderr.String())
		}
		if st, err := os.Stat(filepath.Join(dir, out)); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v, %v", out, st, err)
		}
	}
	plain := obs.ChromeTrace{TraceEvents: tr.TraceEvents[:2]}
	b, _ = json.Marshal(plain)
	noRec := filepath.Join(dir, "plain.json")
	os.WriteFile(noRec, b, 0o600)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("nonsense"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", bad, "--out", filepath.Join(dir, "x.png")}, "is not a Chrome trace"},
		{[]string{"--trace", noRec, "--out", filepath.Join(dir, "x.png")}, "--window all"},
		{[]string{"--trace", path, "--out", filepath.Join(dir, "x.jpg")}, ".png or .svg"},
	} {
		var stderr bytes.Buffer
		if code := run(c.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"--trace", noRec, "--out", filepath.Join(dir, "all.png"), "--window", "all"}, io.Discard, &stderr); code != 0 {
		t.Errorf("--window all: exit %d: %s", code, stderr.String())
	}
}

// Rule: --version and --help print on stdout and exit 0; a bad flag is
// one error on stderr and exit 2.
func TestVersionHelp(t *testing.T) {
	for _, a := range []string{"--version", "--help"} {
		var out, errs strings.Builder
		if code := run([]string{a}, &out, &errs); code != 0 || out.Len() == 0 || errs.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", a, code, out.String(), errs.String())
		}
	}
	var errs strings.Builder
	if code := run([]string{"--bogus"}, io.Discard, &errs); code != 2 || strings.Count(errs.String(), "\n") != 2 {
		t.Errorf("--bogus: exit %d, stderr %q", code, errs.String())
	}
}
