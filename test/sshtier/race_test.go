//go:build race

package sshtier

func init() { raceEnabled = true }
