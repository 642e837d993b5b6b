package launch

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Output streams of a process, as the collapser keys them.
const (
	streamStdout = 0
	streamStderr = 1
	streamEvent  = 2 // a process's event report, printed by gaspirun on stderr
)

// collapsedLine is one line to print: text, prefixed with the processes
// that printed it ("r0-255", "r0-3,7,s9").
type collapsedLine struct {
	stream int
	labels string
	text   string
}

// groupOverhead is what one pending group counts against
// collapser.maxBytes besides its text, and labelOverhead what each of its
// processes counts.
const (
	groupOverhead = 96
	labelOverhead = 24
)

// lineGroup is one pending line and the processes that printed it.
type lineGroup struct {
	seq    uint64
	key    groupKey
	born   time.Time // its first line
	due    time.Time // window after its latest line, at most maxHold after born
	procs  []int
	labels []string
}

// maxHoldWindows is how many windows a group may stay open while more
// processes keep printing its line within a window of each other.
const maxHoldWindows = 5

type groupKey struct {
	stream int
	text   string
}

// collapser is the pure core of output collapsing: identical lines that
// several processes print within window of each other are printed once,
// naming the processes. It reads no clock (now comes with every call) and
// does no I/O; output drives it and arms a timer for next().
//
// The rules:
//   - A group is due window after its latest line (so a line that many
//     processes print a little apart, on a loaded machine, is still one
//     line), but at most maxHoldWindows windows after its first: no line
//     is held longer than that. Groups are printed in the order they were
//     opened; one that falls due waits for the older ones, which are due
//     no later than its own bound.
//   - Each process's lines come out in the order it printed them: a line
//     joins the open group of its text only if that group was opened after
//     every group the process is already in; otherwise it opens a new group
//     (so one text may have several groups pending).
//   - A group that every process has joined cannot grow: it is printed at
//     once, after every group opened before it (which keeps the order).
//   - The pending lines are bounded: past maxBytes (text plus overheads),
//     the oldest groups are printed early.
//   - window <= 0, or a job of one process, prints every line at once.
type collapser struct {
	window   time.Duration
	nprocs   int
	maxBytes int

	q       []*lineGroup            // pending groups, oldest (lowest seq) first
	open    map[groupKey]*lineGroup // the newest pending group of each text
	lastSeq []uint64                // process -> seq of the newest group it joined; 0: none
	seq     uint64
	bytes   int
}

func newCollapser(window time.Duration, nprocs, maxBytes int) *collapser {
	return &collapser{window: window, nprocs: nprocs, maxBytes: maxBytes,
		open: map[groupKey]*lineGroup{}, lastSeq: make([]uint64, max(nprocs, 0))}
}

// maxCollapseProc bounds the process ids the collapser keeps state for
// (the job's, and those that join it later).
const maxCollapseProc = 1 << 16

// addProc counts one more process that prints: a group is complete (and
// printed at once) when every process has joined it.
func (c *collapser) addProc() { c.nprocs++ }

// add takes a line that process proc (labelled label now) printed on
// stream, at now, and returns the lines to print now, in order: those due
// by now, then possibly this one and others.
func (c *collapser) add(now time.Time, proc int, label string, stream int, text string) []collapsedLine {
	out := c.expire(now, nil)
	if c.window <= 0 || c.nprocs <= 1 || proc < 0 || proc >= maxCollapseProc {
		return append(c.flushAll(out), collapsedLine{stream: stream, labels: label, text: text})
	}
	if proc >= len(c.lastSeq) {
		// A process that joined the running job.
		c.lastSeq = append(c.lastSeq, make([]uint64, proc+1-len(c.lastSeq))...)
	}
	k := groupKey{stream, text}
	g := c.open[k]
	if g == nil || c.lastSeq[proc] >= g.seq {
		c.seq++
		g = &lineGroup{seq: c.seq, key: k, born: now}
		c.q = append(c.q, g)
		c.open[k] = g
		c.bytes += len(text) + groupOverhead
	}
	g.due = now.Add(c.window)
	if limit := g.born.Add(maxHoldWindows * c.window); g.due.After(limit) {
		g.due = limit
	}
	g.procs = append(g.procs, proc)
	g.labels = append(g.labels, label)
	c.lastSeq[proc] = g.seq
	c.bytes += labelOverhead
	if len(g.procs) >= c.nprocs {
		for len(c.q) > 0 && c.q[0].seq <= g.seq {
			out = c.pop(out)
		}
	}
	for c.bytes > c.maxBytes && len(c.q) > 0 {
		out = c.pop(out)
	}
	// A group that fell due behind one printed above is next.
	return c.expire(now, out)
}

// expire appends the groups due by now to out.
func (c *collapser) expire(now time.Time, out []collapsedLine) []collapsedLine {
	for len(c.q) > 0 && !c.q[0].due.After(now) {
		out = c.pop(out)
	}
	return out
}

// next is when the oldest pending group is due; false when none is.
func (c *collapser) next() (time.Time, bool) {
	if len(c.q) == 0 {
		return time.Time{}, false
	}
	return c.q[0].due, true
}

// flushAll appends every pending group to out, oldest first.
func (c *collapser) flushAll(out []collapsedLine) []collapsedLine {
	for len(c.q) > 0 {
		out = c.pop(out)
	}
	return out
}

// pop prints the oldest group.
func (c *collapser) pop(out []collapsedLine) []collapsedLine {
	g := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	if c.open[g.key] == g {
		delete(c.open, g.key)
	}
	c.bytes -= len(g.key.text) + groupOverhead + labelOverhead*len(g.procs)
	return append(out, collapsedLine{stream: g.key.stream, labels: formatLabels(g.labels), text: g.key.text})
}

// labelOrder is the order of label kinds in a collapsed prefix: ranks,
// spares, then processes that lost their rank.
var labelOrder = map[string]int{"r": 0, "s": 1, "p": 2}

// formatLabels writes labels such as r0, r1, r2, r3, r7, s9 as
// "r0-3,7,s9": per kind (r, s, p, in that order), the numbers sorted with
// runs of consecutive ones as ranges. A label without a number is written
// as it is, after the others.
func formatLabels(labels []string) string {
	if len(labels) == 1 {
		return labels[0]
	}
	nums := map[string][]int{}
	var kinds, odd []string
	for _, l := range labels {
		i := strings.IndexFunc(l, func(r rune) bool { return r >= '0' && r <= '9' })
		n, err := strconv.Atoi(l[max(i, 0):])
		if i <= 0 || err != nil || n < 0 {
			odd = append(odd, l)
			continue
		}
		kind := l[:i]
		if _, ok := nums[kind]; !ok {
			kinds = append(kinds, kind)
		}
		nums[kind] = append(nums[kind], n)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		oa, ka := labelOrder[a]
		ob, kb := labelOrder[b]
		switch {
		case ka && kb:
			return oa - ob
		case ka != kb:
			if ka {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for _, kind := range kinds {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kind)
		b.WriteString(formatRanges(nums[kind]))
	}
	slices.Sort(odd)
	for _, l := range slices.Compact(odd) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l)
	}
	return b.String()
}

// formatRanges writes numbers as "0-3,7,9-12": sorted, duplicates
// dropped, runs of consecutive numbers as ranges.
func formatRanges(ns []int) string {
	ns = slices.Clone(ns)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	var b strings.Builder
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ns[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ns[j]))
		}
		i = j + 1
	}
	return b.String()
}
