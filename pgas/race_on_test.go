//go:build race

package pgas_test

// raceOn: the race detector slows memory-heavy loops tenfold, so the
// longest of them run fewer rounds under it.
const raceOn = true
