//go:build !race

package proctest

// Race reports whether this binary was built with the race detector: a
// tier builds the programs it runs the same way (Build's race argument),
// and gives them more time (a data race makes such a process exit 66).
const Race = false
