package job

import "github.com/gaspigo/gaspigo/internal/bootstrap"

// ErrRendezvousTimeout is returned by Init when the process got no member
// table within PGAS_RENDEZVOUS_TIMEOUT (default 60s): nobody serves the
// rendezvous, it is unreachable, or not every process of the job
// registered. The message says which and what to do. Programs exit with
// ExitNoRendezvous for it (ExitCode).
var ErrRendezvousTimeout = bootstrap.ErrRendezvousTimeout
