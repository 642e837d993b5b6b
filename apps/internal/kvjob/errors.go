package kvjob

import (
	"fmt"
	"github.com/gaspigo/gaspigo/apps/internal/inject"
)

// ErrInject is wrapped by the errors of a bad --inject specification.
var ErrInject = inject.ErrInject

// ExitError carries a command's exit status; Msg, if set, is printed.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// Usage is a bad-usage error (exit status 2).
func Usage(format string, args ...any) error {
	return &ExitError{Code: 2, Msg: fmt.Sprintf(format, args...)}
}
