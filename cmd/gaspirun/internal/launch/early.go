package launch

import "fmt"

// Exits before the job forms, and plain programs.
//
// Until every process has registered with the rendezvous (the job formed),
// gaspirun cannot tell a gaspigo program from any other (hostname, a
// script) by its exits alone; it learns that a process registered from the
// rendezvous (the driver calls onRegistered). The rule, as cmd/gaspirun
// states it:
//
//   - A process that exits 0 without having registered is a plain program:
//     its exit is held, not judged, while no process has registered.
//   - When every process has ended that way, the job was a plain job, run
//     as mpirun would run it: exit 0.
//   - Once any process has registered, the job is a gaspigo job, which
//     cannot form without the plain processes: it fails (ExitLost), naming
//     one, whichever of the two was seen first.
//   - A process that fails (a non-zero exit, a signal, a lost host) before
//     the job formed fails the job with its code, as mpirun does and as a
//     gaspigo job must (the others would wait for it for ever), spares or
//     not.
//   - A process that registered and exits 0 before the job formed fails it
//     (ExitLost): the others wait for it.

// onEarlyExit judges the end of process p before the job formed.
func (t *tracker) onEarlyExit(p int, ex exitInfo) []action {
	reg := t.firstRegistered()
	switch {
	case ex.ok() && !t.registered[p] && reg >= 0:
		return t.abort(ExitLost, t.plainInJob(p, reg))
	case ex.ok() && !t.registered[p]:
		t.plain[p] = true
		if t.live() == 0 {
			t.phase = finishing // a plain job, every process exited 0
		}
		return nil
	}
	code := ex.code()
	if code == 0 {
		code = ExitLost
	}
	if reg < 0 {
		// Nobody registered: a failing plain program, or a gaspigo program
		// that failed before registering; either way the job is over.
		return t.abort(code, fmt.Sprintf("%s %s", t.describe(p), ex.how()))
	}
	return t.abort(code, fmt.Sprintf("%s %s before every process had registered with the rendezvous, so the job cannot start", t.describe(p), ex.how()))
}

// onRegistered: the driver saw process p registered with the rendezvous
// (connected, or a report from it). The job is then a gaspigo job, which a
// plain process already ended fails.
func (t *tracker) onRegistered(p int) []action {
	if p < 0 || p >= t.nProcs || t.absent[p] || t.registered[p] {
		return nil
	}
	t.registered[p] = true
	if t.phase != running || t.formed {
		return nil
	}
	if t.plain[p] {
		// Its exit was judged before its registration was seen.
		t.plain[p] = false
		return t.abort(ExitLost, fmt.Sprintf("%s exited with code 0 before every process had registered with the rendezvous, so the job cannot start", t.describe(p)))
	}
	for q, pl := range t.plain {
		if pl {
			return t.abort(ExitLost, t.plainInJob(q, p))
		}
	}
	return nil
}

// awaitingRegistration says whether a plain process has ended while others
// run in a job not yet formed: the driver then watches the rendezvous for
// a registration, which would fail the job (onRegistered).
func (t *tracker) awaitingRegistration() bool {
	if t.phase != running || t.formed {
		return false
	}
	for _, pl := range t.plain {
		if pl {
			return true
		}
	}
	return false
}

func (t *tracker) firstRegistered() int {
	for p, r := range t.registered {
		if r {
			return p
		}
	}
	return -1
}

// plainInJob is the reason a job fails when process p exited 0 without
// registering while process reg registered.
func (t *tracker) plainInJob(p, reg int) string {
	return fmt.Sprintf("%s exited with code 0 without registering with the rendezvous, but %s registered, so the job cannot start (every process of a gaspigo job must join it)",
		t.describe(p), t.describe(reg))
}

// plainJob reports whether every process ended as a plain program (the
// job was a plain job, run as under mpirun).
func (t *tracker) plainJob() bool {
	for p, pl := range t.plain {
		if !pl && !t.absent[p] {
			return false
		}
	}
	return true
}
