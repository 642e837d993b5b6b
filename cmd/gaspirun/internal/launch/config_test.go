package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.py")
	os.WriteFile(notExec, []byte("print(1)\n"), 0o644)
	good := DefaultConfig()
	good.Ranks, good.Program = 2, os.Args[0]
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		mut      func(*Config)
		flag     string
		contains string
	}{
		{"no ranks", func(c *Config) { c.Ranks = 0 }, "-n", "at least 1 rank"},
		{"negative spares", func(c *Config) { c.Spares = -1 }, "--spares", "negative"},
		{"too many", func(c *Config) { c.Ranks = MaxProcs; c.Spares = 1 }, "-n", "at most 4096"},
		{"no program", func(c *Config) { c.Program = "" }, "PROGRAM", "usage: gaspirun"},
		{"not on path", func(c *Config) { c.Program = "no-such-program-xyz" }, "PROGRAM", "not found on PATH"},
		{"no such file", func(c *Config) { c.Program = filepath.Join(dir, "missing") }, "PROGRAM", "no such file"},
		{"not executable", func(c *Config) { c.Program = notExec }, "PROGRAM", "chmod +x"},
		{"directory", func(c *Config) { c.Program = dir }, "PROGRAM", "is a directory"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "--timeout", "negative"},
		{"negative linger", func(c *Config) { c.Metrics = ":0"; c.MetricsLinger = -time.Second }, "--metrics-linger", "negative"},
		{"linger without endpoint", func(c *Config) { c.MetricsLinger = time.Second }, "--metrics-linger", "--metrics ADDR"},
		{"zero grace", func(c *Config) { c.Grace = 0 }, "--grace", "positive"},
		{"empty host", func(c *Config) { c.HostLabels = []string{"a", ""} }, "--host-labels", "empty host label"},
		{"duplicate host", func(c *Config) { c.HostLabels = []string{"a", "a"} }, "--host-labels", "twice"},
		{"hosts too few", func(c *Config) { c.HostLabels = []string{"a"}; c.ProcsPerHost = 1 }, "--ranks-per-host", "use --ranks-per-host 2"},
		{"negative per host", func(c *Config) { c.ProcsPerHost = -1 }, "--ranks-per-host", "negative"},
		{"bad policy", func(c *Config) { c.OnDeath = "retry" }, "--on-death", "continue or abort"},
		{"contract var", func(c *Config) { c.Env = []string{"PGAS_PROC=3"} }, "Env", "set by gaspirun"},
		{"bad env", func(c *Config) { c.Env = []string{"novalue"} }, "Env", "KEY=VALUE"},
		{"racks without =", func(c *Config) { c.Racks = "node1,node2" }, "--racks", "RACK=HOST,HOST"},
		{"a host on two racks", func(c *Config) { c.Racks = "r1=a;r2=a" }, "--racks", `host "a" is on racks "r1" and "r2"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.mut(&cfg)
			err := cfg.Validate()
			var fe *FlagError
			if !errors.As(err, &fe) || !errors.Is(err, ErrConfig) || fe.Flag != c.flag || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v, want a %s error saying %q", err, c.flag, c.contains)
			}
		})
	}
}

func TestHostLabels(t *testing.T) {
	cases := []struct {
		hosts []string
		per   int
		n     int
		want  []string
	}{
		{nil, 0, 3, []string{"", "", ""}},
		{nil, 2, 5, []string{"host0", "host0", "host1", "host1", "host2"}},
		{[]string{"a", "b"}, 0, 5, []string{"a", "a", "a", "b", "b"}},
		{[]string{"a", "b", "c"}, 1, 3, []string{"a", "b", "c"}},
		{[]string{"a", "b", "c"}, 2, 4, []string{"a", "a", "b", "b"}},
	}
	for _, c := range cases {
		cfg := Config{Ranks: c.n, HostLabels: c.hosts, ProcsPerHost: c.per}
		for p, w := range c.want {
			if got := cfg.HostLabel(p); got != w {
				t.Errorf("hosts=%v per=%d: process %d on %q, want %q", c.hosts, c.per, p, got, w)
			}
		}
	}
}

func TestPolicy(t *testing.T) {
	if p := (Config{Spares: 1}).Policy(); p != DeathContinue {
		t.Errorf("with spares: %q", p)
	}
	if p := (Config{}).Policy(); p != DeathAbort {
		t.Errorf("without spares: %q", p)
	}
	if p := (Config{OnDeath: DeathContinue}).Policy(); p != DeathContinue {
		t.Errorf("explicit: %q", p)
	}
}
