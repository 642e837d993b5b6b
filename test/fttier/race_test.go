//go:build race

package fttier

func init() { raceEnabled = true }
