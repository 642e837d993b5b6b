package faultpoint

import (
	"strings"
	"testing"
)

// Rule: NAME arms the first hit, NAME:N the Nth; anything else is refused.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Arm
		ok   bool
	}{
		{"pgas.store-wake", Arm{"pgas.store-wake", 1}, true},
		{"pgas.store-wake:3", Arm{"pgas.store-wake", 3}, true},
		{"pgas.store-wake:0", Arm{}, false},
		{"pgas.store-wake:x", Arm{}, false},
		{":2", Arm{}, false},
	} {
		got, err := Parse(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// Rule: only the armed point counts, and only its Nth hit kills, once,
// after the line that says so.
func TestHitKillsAtTheNth(t *testing.T) {
	var out strings.Builder
	p := New(Arm{"a", 3}, "7", &out)
	kills := 0
	p.kill = func() { kills++ }
	for range 2 {
		p.Hit("a")
		p.Hit("b")
	}
	if kills != 0 {
		t.Fatalf("killed after 2 hits of a point armed for the 3rd")
	}
	p.Hit("a")
	p.Hit("a")
	if kills != 1 {
		t.Fatalf("%d kills, want 1", kills)
	}
	if !strings.HasPrefix(out.String(), "faultpoint: SIGKILL process 7 (pid ") || !strings.Contains(out.String(), " at a, hit 3\n") {
		t.Errorf("line %q", out.String())
	}
}

// Rule: without the variable there is nothing to call.
func TestFromEnvUnset(t *testing.T) {
	t.Setenv(EnvVar, "")
	if f, err := FromEnv(1); f != nil || err != nil {
		t.Fatalf("FromEnv without %s = %v, %v; want nil, nil", EnvVar, f != nil, err)
	}
	t.Setenv(EnvVar, "x:0")
	if _, err := FromEnv(1); err == nil {
		t.Fatal("FromEnv accepted x:0")
	}
}
