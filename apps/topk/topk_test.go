package topk

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/kvshuffle"
)

func TestTop(t *testing.T) {
	got := Top([]Item{{"b", 3}, {"a", 3}, {"c", 9}, {"d", 1}}, 3)
	if want := []Item{{"c", 9}, {"a", 3}, {"b", 3}}; !slices.Equal(got, want) {
		t.Fatalf("Top = %v, want %v (ties to the smaller key)", got, want)
	}
	if got := Report(4, 16, got); got != "window=4 records=16 top=c:9,a:3,b:3" {
		t.Fatalf("Report = %q", got)
	}
}

// The streams are functions of (seed, rank, position), odd ranks emit at
// half the rate, and a count window holds ranks*Records records.
func TestGen(t *testing.T) {
	g := Gen{Seed: 3, Keys: 50, Skew: 1.5, Rate: 100}
	a, _ := g.Read(context.Background(), 17)
	b, _ := g.Read(context.Background(), 17)
	if string(a.Key) != string(b.Key) || !a.Time.Equal(b.Time) || !strings.HasPrefix(string(a.Key), "item") {
		t.Fatalf("Read(17) = %q %v then %q %v", a.Key, a.Time, b.Key, b.Time)
	}
	g.Rank = 1
	c, _ := g.Read(context.Background(), 17)
	if c.Time.Sub(Epoch) != 2*a.Time.Sub(Epoch) {
		t.Fatalf("rank 1's record 17 at %v, rank 0's at %v: want twice as late", c.Time.Sub(Epoch), a.Time.Sub(Epoch))
	}
	for _, line := range Reference(3, g, kvshuffle.Windows{Records: 40, Checkpoints: 1}, 3, 2) {
		if !strings.Contains(line, " records=120 ") {
			t.Fatalf("count window report %q, want 120 records", line)
		}
	}
}
