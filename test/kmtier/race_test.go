//go:build race

package kmtier

func init() { raceEnabled = true }
