package health

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped (through *ConfigError) by Config.Validate,
	// CoreConfig.Validate, New and NewCore when a setting or a relation
	// between settings is wrong.
	ErrConfig = errors.New("health: invalid config")
	// ErrBadMessage is wrapped by DecodeMessage, Message.Encode and
	// Detector.Deliver for a detector message that is malformed: wrong size,
	// unknown version or kind, nonzero reserved bytes, or no target.
	ErrBadMessage = errors.New("health: bad message")
	// ErrBadMembers is wrapped by NewCore, New, Core.SetMembers and
	// Detector.SetMembers for a member list with a duplicate or with
	// transport.NoProc in it.
	ErrBadMembers = errors.New("health: bad member list")
	// ErrClosed is returned by the Detector's input methods (Deliver,
	// PeerDown, Hint, SetMembers) after Close.
	ErrClosed = errors.New("health: detector closed")
)

// ConfigError names the setting that failed validation, its value and what
// is wrong with it. It unwraps to ErrConfig.
type ConfigError struct {
	Field  string // the setting, as spelled in Config or CoreConfig
	Value  string // its value, formatted
	Reason string // what is wrong and what to do instead
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s = %s: %s", ErrConfig, e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }
