package health

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProfilesValidate(t *testing.T) {
	for name, c := range map[string]Config{"default": DefaultConfig(), "local": LocalConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := c.Core().Validate(); err != nil {
			t.Errorf("%s core: %v", name, err)
		}
	}
}

// The default profile meets the detection target: p99 < 500 ms after a
// SIGKILL (closed connections), with a 1 ms LAN hop. A silent failure (a
// paused or partitioned process) is found within 2.5 s: slower on purpose,
// so a process starved of CPU on a busy host is not condemned.
func TestDefaultDetectionTarget(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		strong bool
		limit  time.Duration
	}{{true, 500 * time.Millisecond}, {false, 2500 * time.Millisecond}} {
		b := c.DetectionBound(time.Millisecond, tc.strong)
		if b >= tc.limit {
			t.Errorf("DetectionBound(1ms, strong=%v) = %v, want < %v", tc.strong, b, tc.limit)
		}
		t.Logf("default detection bound (strong=%v): %v", tc.strong, b)
	}
	if s, w := c.DetectionBound(time.Millisecond, true), c.DetectionBound(time.Millisecond, false); s >= w {
		t.Errorf("PeerDown bound %v not below the silent bound %v", s, w)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*Config)
		say   string
	}{
		{"Tick", func(c *Config) { c.Tick = 0 }, "positive"},
		{"HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = c.Tick / 2 }, "at least Tick"},
		{"SuspicionTimeout", func(c *Config) { c.SuspicionTimeout = 2 * c.HeartbeatInterval }, "2 × HeartbeatInterval"},
		{"ProbeTimeout", func(c *Config) { c.ProbeTimeout = 0 }, "at least Tick"},
		{"SendTimeout", func(c *Config) { c.SendTimeout = -1 }, "positive"},
		{"SendQueue", func(c *Config) { c.SendQueue = 0 }, "at least 1"},
		{"EventBuffer", func(c *Config) { c.EventBuffer = 0 }, "at least 1"},
		{"Successors", func(c *Config) { c.Successors = 0 }, "at least 1"},
		{"Helpers", func(c *Config) { c.Helpers = 0 }, "at least 1"},
		{"Confirmations", func(c *Config) { c.Confirmations = 0 }, "own word"},
		{"Confirmations", func(c *Config) { c.Confirmations = c.Helpers + 1 }, "must not exceed Helpers (3)"},
		{"MaxLocalHealth", func(c *Config) { c.MaxLocalHealth = -1 }, "0..16"},
		{"MaxLocalHealth", func(c *Config) { c.MaxLocalHealth = 17 }, "0..16"},
		{"MaxPendingProbes", func(c *Config) { c.MaxPendingProbes = 0 }, "at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			before := c
			err := c.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want a *ConfigError wrapping ErrConfig", err)
			}
			if ce.Field != tt.field || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("error %q: want field %s and %q", err, tt.field, tt.say)
			}
			if c != before {
				t.Fatal("Validate changed the config")
			}
		})
	}
}

func TestCoreConfigValidate(t *testing.T) {
	good := scriptConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, edit := range map[string]func(*CoreConfig){
		"IntervalTicks": func(c *CoreConfig) { c.IntervalTicks = 0 },
		"SuspectTicks":  func(c *CoreConfig) { c.SuspectTicks = 2 * c.IntervalTicks },
		"ProbeTicks":    func(c *CoreConfig) { c.ProbeTicks = 0 },
		"RoundTicks":    func(c *CoreConfig) { c.RoundTicks = c.ProbeTicks - 1 },
	} {
		c := good
		edit(&c)
		var ce *ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: Validate = %v", field, err)
		}
	}
}

func TestConfigToTicks(t *testing.T) {
	c := DefaultConfig()
	c.Tick = 10 * time.Millisecond
	c.HeartbeatInterval = 55 * time.Millisecond // rounds up to 6 ticks
	c.SuspicionTimeout = 150 * time.Millisecond
	c.ProbeTimeout = 91 * time.Millisecond // rounds up to 10 ticks
	cc := c.Core()
	want := CoreConfig{
		IntervalTicks: 6, SuspectTicks: 15, ProbeTicks: 10, RoundTicks: 22,
		Successors: c.Successors, Helpers: c.Helpers, Confirmations: c.Confirmations,
		MaxLocalHealth: c.MaxLocalHealth, MaxPendingProbes: c.MaxPendingProbes,
	}
	if cc != want {
		t.Fatalf("Core() = %+v\nwant     %+v", cc, want)
	}
	if got, want := c.DetectionBound(10*time.Millisecond, true), time.Duration(3+10+2)*c.Tick; got != want {
		t.Errorf("DetectionBound strong = %v, want %v", got, want)
	}
	if got, want := c.DetectionBound(10*time.Millisecond, false), time.Duration(3+10+2+15)*c.Tick; got != want {
		t.Errorf("DetectionBound silent = %v, want %v", got, want)
	}
}

// Rule: Stretched(f) multiplies every duration by f and keeps the counts;
// the tick grows by up to f², to no less than f times the old tick and no
// more than a quarter of the stretched heartbeat interval (the wake-ups of
// an idle process), so the detection bounds in time stay about f times the
// unstretched ones and the config valid; f <= 1 changes nothing.
func TestStretched(t *testing.T) {
	c := DefaultConfig()
	for _, f := range []int{2, 4, 8, 32, 256} {
		s := c.Stretched(f)
		d := time.Duration(f)
		if err := s.Validate(); err != nil {
			t.Fatalf("Stretched(%d) does not validate: %v", f, err)
		}
		if s.HeartbeatInterval != d*c.HeartbeatInterval || s.SuspicionTimeout != d*c.SuspicionTimeout ||
			s.ProbeTimeout != d*c.ProbeTimeout || s.SendTimeout != d*c.SendTimeout {
			t.Errorf("Stretched(%d) = %+v, want every duration but the tick of %+v times %d", f, s, c, f)
		}
		if s.Tick < d*c.Tick || s.Tick > d*d*c.Tick || (s.Tick > d*c.Tick && s.Tick > s.HeartbeatInterval/4) {
			t.Errorf("Stretched(%d).Tick = %v, want from %v up to %v, or the quarter interval %v", f, s.Tick, d*c.Tick, d*d*c.Tick, s.HeartbeatInterval/4)
		}
		if got := s.Core().IntervalTicks; got < 4 {
			t.Errorf("Stretched(%d): %d ticks per heartbeat interval, want at least 4", f, got)
		}
		sc, cc := s.counts(), c.counts()
		if sc != cc {
			t.Errorf("Stretched(%d) counts %+v, want %+v", f, sc, cc)
		}
		for _, strong := range []bool{true, false} {
			got, base := s.DetectionBound(0, strong), d*c.DetectionBound(0, strong)
			if got < base*9/10 || got > base*5/4 {
				t.Errorf("Stretched(%d) detection bound (strong %v) %v, want about %d × %v", f, strong, got, f, c.DetectionBound(0, strong))
			}
		}
	}
	if c.Stretched(1) != c || c.Stretched(0) != c {
		t.Errorf("Stretched(1) or Stretched(0) changed the config")
	}
}
