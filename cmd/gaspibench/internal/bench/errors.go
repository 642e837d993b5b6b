package bench

import "errors"

var (
	// ErrConfig is wrapped by ParseFlags and Config.Validate when a flag or
	// a Config field is out of range. The message names the flag or field,
	// the value, and what to use instead.
	ErrConfig = errors.New("bench: invalid configuration")
	// ErrJob is wrapped by Run when the job cannot run the selected tests:
	// too few ranks for the point-to-point tests, or ranks started with
	// different settings.
	ErrJob = errors.New("bench: job does not fit the benchmark")
	// ErrVerify is wrapped by Run when data moved by a benchmark is not what
	// was sent: a write, read or allreduce gave wrong bytes.
	ErrVerify = errors.New("bench: data check failed")
	// ErrRaw is wrapped by Run when the plain TCP baseline connection between
	// ranks 0 and 1 cannot be set up or breaks.
	ErrRaw = errors.New("bench: raw TCP baseline failed")
)
