package simhost

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped (through *ConfigError) by Config.Validate
	// and New for a bad setting.
	ErrConfig = errors.New("simhost: invalid config")
	// ErrNoSubnet is returned by New (and ChooseSubnet) when every /24 of
	// the range 10.200.0.0-10.249.255.0 overlaps an address or route that
	// already exists in the root namespace.
	ErrNoSubnet = errors.New("simhost: no free subnet")
	// ErrClosed is returned by Cut, Heal and Crash after Close.
	ErrClosed = errors.New("simhost: cluster closed")
	// ErrUnknownHost is returned by Cut, Heal and Crash for a host of
	// another cluster (or nil).
	ErrUnknownHost = errors.New("simhost: host not in this cluster")
)

// ConfigError names the setting that failed validation, its value and what
// is wrong with it. It unwraps to ErrConfig.
type ConfigError struct {
	Field  string // the setting, as spelled in Config
	Value  string // its value, formatted
	Reason string // what is wrong and what to do instead
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("simhost: invalid config: %s = %s: %s", e.Field, e.Value, e.Reason)
}

func (e *ConfigError) Unwrap() error { return ErrConfig }

// CmdError is an iproute2 command that failed, with its output.
type CmdError struct {
	Args   []string // the command line, "ip" first
	Output string   // its combined output, trimmed
	Err    error    // from exec
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("simhost: %v: %v: %s", e.Args, e.Err, e.Output)
}

func (e *CmdError) Unwrap() error { return e.Err }
