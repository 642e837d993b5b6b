package cli

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// A failed run under a context a signal ended exits 128+N; a successful
// one, or one without a signal, keeps its code.
func TestSignalStatus(t *testing.T) {
	ctx, stop := SignalContext()
	defer stop()
	if got := SignalStatus(ctx, 1); got != 1 {
		t.Fatalf("no signal: status %d, want 1", got)
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("SIGTERM did not end the context within 30s")
	}
	if got := SignalStatus(ctx, 1); got != 143 {
		t.Errorf("a failed run after SIGTERM: status %d, want 143", got)
	}
	if got := SignalStatus(ctx, 0); got != 0 {
		t.Errorf("a run that succeeded after SIGTERM: status %d, want 0", got)
	}
	c2, stop2 := SignalContext()
	stop2()
	if got := SignalStatus(c2, 3); got != 3 || context.Cause(c2) != context.Canceled {
		t.Errorf("a stopped context: status %d, cause %v; want 3, context.Canceled", got, context.Cause(c2))
	}
}

// Work a signal cut short is said as the interruption, once and without a
// rank; an error of its own keeps its words.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cut := fmt.Errorf("rank 3: kvshuffle: send: pgas: timeout (%w)", context.Canceled)
	if got := Interrupted(ctx, cut); got != cut {
		t.Fatalf("no signal: %v, want the error itself", got)
	}
	cancel(&SignalError{Signal: syscall.SIGINT})
	var ee *ExitError
	if got := Interrupted(ctx, cut); !errors.As(got, &ee) || ee.Code != 130 || ee.Msg != "interrupted by SIGINT" {
		t.Errorf("cut short by SIGINT: %v, want exit 130 saying interrupted by SIGINT", got)
	}
	own := errors.New("--out is not empty")
	if got := Interrupted(ctx, own); got != own {
		t.Errorf("its own error after a signal: %v, want it kept", got)
	}
	if got := Interrupted(ctx, nil); got != nil {
		t.Errorf("success after a signal: %v, want nil", got)
	}
}
