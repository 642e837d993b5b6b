package launch

import (
	"fmt"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// summary is the final line: processes, how they ended, exit status.
func (t *tracker) summary() string {
	counts := map[string]int{}
	present := 0
	for p := range t.exited {
		if t.absent[p] {
			continue
		}
		present++
		switch {
		case t.byHand[p] && t.exited[p]:
			counts["ended (joined by hand: no exit status)"]++
		case t.byHand[p]:
			counts["still running (joined by hand)"]++
		case !t.exited[p]:
			counts["still running"]++
		case t.stopped[p]:
			counts["stopped by gaspirun"]++
		case t.exit[p].ok():
			counts["exited 0"]++
		case t.exit[p].Lost != "":
			counts["lost (no exit status from its host)"]++
		default:
			counts[t.exit[p].String()]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "exited 0") != (keys[j] == "exited 0") {
			return keys[i] == "exited 0"
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	spares := t.nInitial - t.nRanks
	joined := ""
	if n := present - t.nInitial; n > 0 {
		joined = fmt.Sprintf(" + %d joined", n)
	}
	s := fmt.Sprintf("%d %s (%d %s + %d %s%s): %s",
		present, plural(present, "process", "processes"), t.nRanks, plural(t.nRanks, "rank", "ranks"),
		spares, plural(spares, "spare", "spares"), joined, strings.Join(parts, ", "))
	if t.maxRestarts > 0 {
		n := t.restarts - t.queued
		s += fmt.Sprintf("; %d %s started (budget %d)", n, plural(n, "replacement", "replacements"), t.maxRestarts)
	}
	return s
}

// signalName is e.g. "SIGKILL", or the description for a signal without a
// name.
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return plural(len(rs), "rank ", "ranks ") + strings.Join(s, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine keeps a report's text on one output line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
