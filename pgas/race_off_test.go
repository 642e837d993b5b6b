//go:build !race

package pgas_test

const raceOn = false
