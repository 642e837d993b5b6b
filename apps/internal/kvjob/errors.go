package kvjob

import (
	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/internal/inject"
)

// ErrInject is wrapped by the errors of a bad --inject specification.
var ErrInject = inject.ErrInject

// ExitError carries a command's exit status; Msg, if set, is printed.
type ExitError = cli.ExitError

// Usage is a bad-usage error (exit status 2): one line naming the flag
// and what to give instead.
func Usage(format string, args ...any) error { return cli.Usage(format, args...) }
