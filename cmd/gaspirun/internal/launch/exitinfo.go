package launch

import (
	"fmt"
	"syscall"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
)

// exitInfo is how a process ended.
type exitInfo struct {
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // 0 when it exited
	// Lost says why a remote process's exit status never arrived (its
	// host or connection died): it then counts as killed by Signal
	// (SIGKILL). LostCode is how its ssh or srun client ended, as a shell
	// reports it (255 for an ssh error).
	Lost     string
	LostCode int
}

// exitInfoFrom is the exitInfo of a process that ended as st.
func exitInfoFrom(st remote.Status) exitInfo { return exitInfo{Code: st.Code, Signal: st.Signal} }

func (e exitInfo) ok() bool { return e.Signal == 0 && e.Code == 0 }

// code is the status a shell would report for the process.
func (e exitInfo) code() int {
	switch {
	case e.Lost != "":
		return e.LostCode
	case e.Signal != 0:
		return 128 + int(e.Signal)
	}
	return e.Code
}

// how is String after a process's name: "exited with code 3", "was
// killed by signal 9 (SIGKILL)", "was lost: ...".
func (e exitInfo) how() string {
	if e.Signal != 0 {
		return "was " + e.String()
	}
	return e.String()
}

func (e exitInfo) String() string {
	if e.Lost != "" {
		return "lost: " + e.Lost
	}
	if e.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), signalName(e.Signal))
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

// ExitFenced is the exit code of a process that learnt it was declared
// failed and replaced in a newer epoch (job.ExitDeclaredFailed). With
// spares it is a lost process like a killed one: the job goes on.
const ExitFenced = 77

// ExitCutOff is the exit code of a process that gave up after it had no
// contact with the membership's quorum for longer than PGAS_CUTOFF
// (job.ExitCutOff): a process on a host cut off from the others. It is
// judged like ExitFenced: with spares the others replace it and the job
// goes on; a rank it held that nobody took over fails the job with this
// code.
const ExitCutOff = 74

// leftMembership reports whether code says that the process left because
// the membership went on without it (fenced or cut off).
func leftMembership(code int) bool { return code == ExitFenced || code == ExitCutOff }

// exitCannotJoin is a joiner's exit code when the rendezvous or the
// membership could not take it in (job.ExitNoRendezvous).
const exitCannotJoin = 69
