package metrics

import "errors"

// ErrEnv is wrapped by FromEnv for a PGAS_METRICS, PGAS_TRACE or
// PGAS_TRACE_EVENTS value that cannot be used; the message says what to
// give instead.
var ErrEnv = errors.New("metrics: bad environment")
