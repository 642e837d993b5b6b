package recovery

import (
	"time"

	"github.com/gaspigo/gaspigo/obs"
)

// observeView records the membership phase of attempt a: the wait in
// Recover for the view that replaced the failed processes.
func observeView(a Attempt) {
	obs.RecoveryPhase.With("membership").Histogram.Observe(a.View.Seconds())
	obs.Record("recovery", "wait for the new view", a.Started)
}

// observeRestore records the restore phase of attempt a, which began at
// t0, and the whole recovery when it succeeded.
func observeRestore(a Attempt, t0 time.Time, err error) {
	obs.RecoveryPhase.With("restore").Histogram.ObserveSince(t0)
	if err != nil {
		obs.Record("recovery", "restore interrupted", t0, "err", err)
		return
	}
	obs.Record("recovery", "restore", t0)
	total := time.Since(a.Started)
	obs.RecoveryPhase.With("total").Histogram.Observe(total.Seconds())
	obs.LastRecovery.Set(total.Seconds())
	obs.Recoveries.Inc()
	obs.Record("recovery", "recovery", a.Started)
}
