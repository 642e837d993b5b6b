package pgas

import (
	"errors"
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
