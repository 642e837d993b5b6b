package health

// State is a rank's entry in the error-state vector, as the agreed
// membership sees it.
type State uint8

const (
	// Healthy: the rank's process is in the committed view.
	Healthy State = iota
	// Corrupt: the rank's process was declared failed and not yet replaced
	// in the committed view.
	Corrupt
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "HEALTHY"
	case Corrupt:
		return "CORRUPT"
	}
	return "UNKNOWN"
}

// Entry is one rank's entry: the agreed state plus this process's local
// suspicion, which is a hint only and never by itself a verdict.
type Entry struct {
	State   State
	Suspect bool
}
