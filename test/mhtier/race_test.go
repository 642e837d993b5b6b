//go:build race

package mhtier

func init() { raceEnabled = true }
