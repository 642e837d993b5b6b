package remote

import (
	"reflect"
	"testing"
)

func TestMergeEnviron(t *testing.T) {
	got := MergeEnviron([]string{"PATH=/bin", "PGAS_TOKEN=stale", "PGAS_LOG=debug"}, []string{"PGAS_PROC=1"}, 8, 2)
	want := []string{"PATH=/bin", "PGAS_LOG=debug", "GOMAXPROCS=4", "PGAS_PROC=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got = MergeEnviron([]string{"GOMAXPROCS=3"}, nil, 8, 2)
	if !reflect.DeepEqual(got, []string{"GOMAXPROCS=3"}) {
		t.Errorf("user GOMAXPROCS: %q", got)
	}
}

func TestProcsPerRank(t *testing.T) {
	for _, c := range []struct{ cpus, ranks, want int }{
		{2, 1, 2}, {2, 2, 1}, {2, 4, 1}, {8, 2, 4}, {8, 3, 2}, {1, 0, 1},
	} {
		if got := procsPerRank(c.cpus, c.ranks); got != c.want {
			t.Errorf("procsPerRank(%d cpus, %d ranks) = %d, want %d", c.cpus, c.ranks, got, c.want)
		}
	}
}
