package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// A signal that stops a process of a running job (the kubelet's SIGTERM
// when its pod is deleted, gaspirun's at a teardown, a terminal's SIGINT)
// is not the program's own failure: the job's membership replaces the
// process, and the launcher or the Job's podFailurePolicy must be able to
// tell it from an error. So a program stopped by one exits as a shell
// reports a death by it, 128+N (143 for SIGTERM, 130 for SIGINT), whatever
// error its cancelled work returned.

// SignalError is the cause of a SignalContext's end.
type SignalError struct{ Signal syscall.Signal }

func (e *SignalError) Error() string { return "stopped by " + e.Signal.String() }

// SignalContext returns a context that ends at SIGINT or SIGTERM, with a
// *SignalError as its cause, and the function that stops listening.
func SignalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			cancel(&SignalError{Signal: s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	}
}

// SignalStatus is the exit status of a program whose run returned code
// under ctx (from SignalContext): 128+N if a signal N ended ctx and the run
// did not succeed, code otherwise. A run that finished its work despite
// a late signal keeps its 0.
func SignalStatus(ctx context.Context, code int) int {
	var se *SignalError
	if code != 0 && errors.As(context.Cause(ctx), &se) {
		return 128 + int(se.Signal)
	}
	return code
}

// Interrupted is err as a signal that ended ctx (SignalContext) makes
// it: the error of work the signal cut short says "timeout (context
// canceled)" and names the rank, which tells the user nothing and defeats
// the launcher's folding of identical lines. It returns one line without
// a rank, "interrupted by SIGTERM", and the signal's status, or err as it
// is when no signal ended ctx, err is nil, or err is not the signal's
// doing (a refusal found before it keeps its own words).
func Interrupted(ctx context.Context, err error) error {
	var se *SignalError
	if err == nil || !errors.As(context.Cause(ctx), &se) {
		return err
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, new(*SignalError)) {
		return err
	}
	return &ExitError{Code: 128 + int(se.Signal), Msg: "interrupted by " + signalName(se.Signal)}
}

// signalName is SIGINT or SIGTERM, the signals SignalContext ends at.
func signalName(s syscall.Signal) string {
	if s == syscall.SIGINT {
		return "SIGINT"
	}
	return "SIGTERM"
}
