package launch

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

var (
	// ErrConfig is returned (wrapped in *FlagError) by Config.Validate and
	// Run for a configuration gaspirun cannot run.
	ErrConfig = errors.New("launch: bad configuration")

	// ErrStart is returned by Run when the job could not be started: the
	// rendezvous could not listen, the state directory could not be made,
	// or a process could not be started. Processes already started are
	// stopped first.
	ErrStart = errors.New("launch: cannot start the job")
)

// FlagError says which setting (named by its gaspirun flag) is wrong, what
// it holds and what to change. It wraps ErrConfig.
type FlagError struct {
	Flag    string // e.g. "-n", "--spares", "PROGRAM"
	Value   string
	Problem string
	Fix     string
}

func (e *FlagError) Error() string {
	s := fmt.Sprintf("%s %s: %s", e.Flag, e.Value, e.Problem)
	if e.Value == "" {
		s = fmt.Sprintf("%s: %s", e.Flag, e.Problem)
	}
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

// Unwrap returns ErrConfig.
func (e *FlagError) Unwrap() error { return ErrConfig }

// Interrupt is the cancellation cause a caller of Run gives when the user
// interrupts the launcher (context.WithCancelCause). Run then exits with
// 128 + the signal number (130 for SIGINT, 143 for SIGTERM); a ctx cancelled
// without it gives 130.
type Interrupt struct{ Signal os.Signal }

func (i *Interrupt) Error() string { return fmt.Sprintf("launch: interrupted by %v", i.Signal) }

// ExitCode is 128 + the signal number, as a shell reports it.
func (i *Interrupt) ExitCode() int {
	if s, ok := i.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitInterrupted
}

// HostfileError is a bad line of a hostfile. It wraps ErrConfig.
type HostfileError struct {
	File    string
	Line    int    // 1-based
	Text    string // the line, trimmed
	Problem string
	Fix     string
}

func (e *HostfileError) Error() string {
	s := fmt.Sprintf("--hostfile %s: line %d (%q): %s", e.File, e.Line, e.Text, e.Problem)
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

// Unwrap returns ErrConfig.
func (e *HostfileError) Unwrap() error { return ErrConfig }
