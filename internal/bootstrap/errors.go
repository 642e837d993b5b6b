package bootstrap

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrEnv is returned (wrapped in *EnvError) by FromEnv, FromLookup and
	// Env.Validate when the environment does not describe a valid process of
	// a job.
	ErrEnv = errors.New("bootstrap: bad environment")

	// ErrConfig is returned by ServerConfig.Validate, ClientConfig.Validate,
	// Serve and Register when a configuration value is out of range.
	ErrConfig = errors.New("bootstrap: bad configuration")

	// ErrRejected is returned (wrapped in *RejectedError) by Register and
	// JoinRunning when the rendezvous refused the registration: a duplicate
	// or out-of-range process id, a joiner's id that was not reserved or is
	// taken, or a process started for a different job shape. Retrying does
	// not help; the processes were started inconsistently.
	ErrRejected = errors.New("bootstrap: registration rejected by the rendezvous")

	// ErrAuth is returned by Register and JoinRunning when the rendezvous
	// repeatedly fails the job-token handshake: PGAS_TOKEN differs from the
	// launcher's, or the address is not a gaspigo rendezvous.
	ErrAuth = errors.New("bootstrap: rendezvous authentication failed")

	// ErrRendezvous is returned by Register when ctx ends before the member
	// table arrived: the rendezvous was not reachable, or not every process
	// registered in time. The error text names the last attempt's failure.
	ErrRendezvous = errors.New("bootstrap: no member table from the rendezvous")

	// ErrRendezvousTimeout is returned by Register and JoinRunning,
	// together with ErrRendezvous, when ClientConfig.Timeout
	// (PGAS_RENDEZVOUS_TIMEOUT) passed before the member table arrived:
	// nobody served the rendezvous, it was unreachable, or not every
	// process registered. The text says
	// which, and who should serve it. Programs exit with a code of their own
	// for it (job.ExitNoRendezvous).
	ErrRendezvousTimeout = errors.New("bootstrap: gave up waiting for the rendezvous")

	// ErrProtocol is returned by the message decoder, and thus by Register,
	// for a malformed message or table.
	ErrProtocol = errors.New("bootstrap: rendezvous protocol error")

	// ErrTooLarge is returned by the message codec when a message exceeds
	// its size cap (MaxClientMessage from a process, MaxServerMessage from
	// the rendezvous).
	ErrTooLarge = errors.New("bootstrap: rendezvous message too large")

	// ErrServe is returned by ServeInProcess and Join when this process
	// should host the rendezvous but cannot listen on PGAS_RENDEZVOUS.
	ErrServe = errors.New("bootstrap: cannot host the rendezvous")

	// ErrJobFinished is returned by JoinRunning when the job this process
	// came to join has ended (Server.Finish): there is nothing left to
	// join, and a joiner exits 0 at once. Server.Reserve returns it too.
	ErrJobFinished = errors.New("bootstrap: the job has finished; nothing to join")

	// ErrIDsUsedUp is returned by Server.Reserve when every process id
	// below MaxProcs has been handed out (ids are never reused): no more
	// processes can join the job. A joiner that comes then is rejected.
	ErrIDsUsedUp = errors.New("bootstrap: no process ids left for joiners")

	// ErrClosed is returned by Serve when the Server was closed before or
	// while it started.
	ErrClosed = errors.New("bootstrap: closed")
)

// EnvError says which environment variable was wrong, what it held, and
// what to do instead. It wraps ErrEnv.
type EnvError struct {
	Var     string // the variable, e.g. "PGAS_NPROCS"
	Value   string // what it held; "" when unset
	Unset   bool   // the variable was not set (or empty)
	Problem string // what is wrong
	Fix     string // what to do instead
}

func (e *EnvError) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap: ")
	if e.Unset {
		fmt.Fprintf(&b, "%s is not set", e.Var)
	} else {
		fmt.Fprintf(&b, "%s=%q", e.Var, e.Value)
	}
	if e.Problem != "" {
		b.WriteString(": ")
		b.WriteString(e.Problem)
	}
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns ErrEnv.
func (e *EnvError) Unwrap() error { return ErrEnv }

// RejectedError is the rendezvous's reason for refusing a registration. It
// wraps ErrRejected.
type RejectedError struct {
	Proc   uint32 // the process that was refused (JoinerID: a joiner without an id yet)
	Reason string // the rendezvous's explanation
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("bootstrap: rendezvous rejected %s: %s", procName(e.Proc), e.Reason)
}

// Unwrap returns ErrRejected.
func (e *RejectedError) Unwrap() error { return ErrRejected }

// RegisterError is what Register and JoinRunning return when they give up.
// Err wraps one of ErrRendezvous (ctx ended), ErrRejected, ErrAuth,
// ErrProtocol or (JoinRunning) ErrJobFinished, and, for a ctx that ended,
// the ctx error as well.
type RegisterError struct {
	Proc     uint32 // the registering process (JoinerID: a joiner without an id yet)
	Addr     string // the rendezvous address (PGAS_RENDEZVOUS)
	Attempts int    // connection attempts made
	Err      error
}

func (e *RegisterError) Error() string {
	inner := ""
	if e.Err != nil {
		inner = strings.TrimPrefix(e.Err.Error(), "bootstrap: ")
	}
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("bootstrap: %s could not register with the rendezvous at %s (%d %s): %s",
		procName(e.Proc), e.Addr, e.Attempts, attempts, inner)
}

// Unwrap returns Err.
func (e *RegisterError) Unwrap() error { return e.Err }
