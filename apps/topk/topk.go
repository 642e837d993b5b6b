package topk

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/kvshuffle"
)

// Epoch is the event time of every stream's first record.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Gen is rank Rank's generated stream (see the package doc); it is a
// kvshuffle.Source.
type Gen struct {
	Seed uint64
	Rank int
	Keys uint64  // items, >= 2
	Skew float64 // Zipf s, > 1
	Rate float64 // records per second of event time of rank 0, > 0
}

var one = []byte{1} // varint 1

// Read returns the record at pos.
func (g Gen) Read(_ context.Context, pos uint64) (kvshuffle.Record, error) {
	r := rand.New(rand.NewPCG(g.Seed, uint64(g.Rank)<<40|pos))
	z := rand.NewZipf(r, g.Skew, 1, g.Keys-1)
	t := Epoch.Add(time.Duration(float64(pos) * float64(1+g.Rank%2) / g.Rate * float64(time.Second)))
	return kvshuffle.Record{Time: t, Key: fmt.Appendf(nil, "item%d", z.Uint64()), Value: one}, nil
}

// Item is an item and its count in a window.
type Item struct {
	Key   string
	Count uint64
}

// Top returns the k items of most count (ties: the smaller key first).
func Top(items []Item, k int) []Item {
	slices.SortFunc(items, func(a, b Item) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return items[:min(k, len(items))]
}

// Report is the line of window w (see the package doc).
func Report(w, records uint64, top []Item) string {
	s := make([]string, len(top))
	for i, it := range top {
		s[i] = fmt.Sprintf("%s:%d", it.Key, it.Count)
	}
	return fmt.Sprintf("window=%d records=%d top=%s", w, records, strings.Join(s, ","))
}

// Reference computes the reports of windows 0..windows-1 of ranks
// streams in one process.
func Reference(ranks int, gen Gen, win kvshuffle.Windows, windows int, k int) []string {
	counts := make([]map[string]uint64, windows)
	records := make([]uint64, windows)
	for w := range counts {
		counts[w] = map[string]uint64{}
	}
	for r := range ranks {
		g := gen
		g.Rank = r
		for pos := uint64(0); ; pos++ {
			rec, _ := g.Read(context.Background(), pos)
			var w uint64
			if win.Records > 0 {
				w = pos / win.Records
			} else {
				w = uint64(rec.Time.Sub(win.Start) / win.Span)
			}
			if w >= uint64(windows) {
				break
			}
			counts[w][string(rec.Key)]++
			records[w]++
		}
	}
	out := make([]string, windows)
	for w, m := range counts {
		items := make([]Item, 0, len(m))
		for key, c := range m {
			items = append(items, Item{key, c})
		}
		out[w] = Report(uint64(w), records[w], Top(items, k))
	}
	return out
}
