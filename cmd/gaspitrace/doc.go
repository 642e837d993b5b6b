// Command gaspitrace draws a job's trace (gaspirun --trace FILE) as a
// timeline picture, PNG or SVG: one row per process, a bar per span,
// coloured by category (iterations, checkpoints, detection, membership,
// recovery, shuffle), a marker per instant (a view applied).
//
//	gaspitrace --trace job.json --out recovery.png               # around the first recovery
//	gaspitrace --trace job.json --out all.svg --window all        # the whole job
//	gaspitrace --trace job.json --out w.png --from 1.2s --to 1.9s # since the first event
//
// By default the window is the first recovery: from 200 ms before the
// first failure detection to 300 ms after the last restore ends. The same
// file opens in ui.perfetto.dev or chrome://tracing for interactive use.
package main
