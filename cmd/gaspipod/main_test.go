package main

import (
	"strings"
	"testing"
)

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		run  bool
		want string // in the reason or the error
		bad  bool
	}{
		{env: nil, run: true},
		{env: map[string]string{varFailures: "", varIgnoredFailures: " "}, run: true},
		{env: map[string]string{varFailures: "0", varIgnoredFailures: "0"}, run: true},
		{env: map[string]string{varFailures: "1", varIndex: "3"}, want: "index 3 was started before (1 failed, 0 ignored pods)"},
		{env: map[string]string{varIgnoredFailures: "2"}, want: "index ? was started before (0 failed, 2 ignored pods)"},
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
		if err != nil || d.run != tc.run || !strings.Contains(d.why, tc.want) {
			t.Errorf("%v: %+v, %v; want run=%v and a reason containing %q", tc.env, d, err, tc.run, tc.want)
		}
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"--"}, {"--help"}} {
		if code := run(args, lookupOf(nil)); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
	if code := run([]string{"--", "/nonexistent/gaspipod-test"}, lookupOf(nil)); code != 127 {
		t.Errorf("a missing program: exit %d, want 127", code)
	}
	if code := run([]string{"/nonexistent/gaspipod-test"}, lookupOf(map[string]string{varFailures: "1"})); code != 0 {
		t.Errorf("a replacement pod: exit %d, want 0 without running the program", code)
	}
	if code := run([]string{"prog"}, lookupOf(map[string]string{varFailures: "many"})); code != 2 {
		t.Errorf("a malformed count: exit %d, want 2", code)
	}
}
