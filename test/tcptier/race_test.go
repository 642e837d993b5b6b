//go:build race

package tcptier

func init() { raceEnabled = true }
