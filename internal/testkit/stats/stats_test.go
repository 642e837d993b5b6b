package stats

import "testing"

func TestMedianPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if m := Median(xs); m != 3 {
		t.Errorf("Median = %v, want 3", m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("Median of an even count = %v, want 2.5", m)
	}
	if xs[0] != 5 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {50, 3}, {99, 5}, {100, 5}, {20, 1}, {30, 2}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if Median(nil) != 0 || Percentile(nil, 50) != 0 {
		t.Error("empty input: want 0")
	}
}
