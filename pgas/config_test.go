package pgas

import (
	"errors"
	"strings"
	"testing"
)

// Config.Validate names what is wrong, wraps ErrConfig, and never
// changes the Config.
func TestConfigValidateWrapsErrConfig(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no ranks":     func(c *Config) { c.NumRanks = 0 },
		"no transport": func(c *Config) { c.NumRanks, c.NumProcs = 1, 1 },
		"queues":       func(c *Config) { c.NumRanks, c.NumProcs, c.NumQueues = 1, 1, 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate = %v, want an error wrapping ErrConfig", name, err)
		}
	}
}

// Config.Validate refuses rack labels that do not fit the host labels: a
// label for every process, none empty, one rack per host.
func TestConfigValidateRacks(t *testing.T) {
	hosts := []string{"a", "a", "b"}
	for _, tc := range []struct {
		name   string
		hosts  []string
		racks  []string
		reason string // in the error; "" for none
	}{
		{"good", hosts, []string{"x", "x", "y"}, ""},
		{"none", hosts, nil, ""},
		{"without hosts", nil, []string{"x", "x", "y"}, "give a rack label for every process"},
		{"too few", hosts, []string{"x", "x"}, "2 rack labels for 3 host labels"},
		{"empty", hosts, []string{"x", "", "y"}, "empty rack label"},
		{"a host on two racks", hosts, []string{"x", "z", "y"}, `host "a" is on racks "x" and "z"`},
	} {
		c := Config{Hosts: tc.hosts, Racks: tc.racks}
		err := c.validateRacks()
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.reason != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.reason)):
			t.Errorf("%s: %v, want an error wrapping ErrConfig saying %q", tc.name, err, tc.reason)
		}
	}
}
