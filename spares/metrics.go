package spares

import "github.com/gaspigo/gaspigo/obs"

// joinsApplied counts the AddSpare commands that added a process to the
// job, as this process applied them (through Raft or the tree): every
// process counts the joins it saw committed, so the job's count is the
// largest among its processes (a process that joined later, or caught up
// from a whole state, counts only the joins it applied itself). The pool's
// size is gaspigo_spares_available, set by the runtime from the view.
var joinsApplied = obs.Default.Counter("gaspigo_spares_joined_total",
	"Processes that joined the running job (AddSpare committed), as this process applied them.").With().Counter
