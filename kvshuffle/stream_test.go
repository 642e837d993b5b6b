package kvshuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"sync"
	"testing"
	"time"
)

// genSource is a deterministic source: rank r's record at pos has one of
// 40 keys, value 1 (varint), and event time t0 + pos*(r+1) ms.
type genSource struct{ rank int }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (g genSource) Read(_ context.Context, pos uint64) (Record, error) {
	h := (pos*2654435761 + uint64(g.rank)*40503) % 97 % 40
	return Record{Time: t0.Add(time.Duration(pos) * time.Duration(g.rank+1) * time.Millisecond),
		Key: fmt.Appendf(nil, "k%02d", h), Value: binary.AppendUvarint(nil, 1)}, nil
}

// reference counts the keys of each window from the sources.
func streamReference(n int, cfg Windows, windows int) []map[string]uint64 {
	out := make([]map[string]uint64, windows)
	for w := range out {
		out[w] = map[string]uint64{}
	}
	for r := range n {
		g := genSource{r}
		for pos := uint64(0); ; pos++ {
			rec, _ := g.Read(context.Background(), pos)
			w := pos / max(cfg.Records, 1)
			if cfg.Span > 0 {
				w = uint64(rec.Time.Sub(cfg.Start) / cfg.Span)
			}
			if w >= uint64(windows) {
				break
			}
			out[w][string(rec.Key)]++
		}
	}
	return out
}

var errAbandon = errors.New("abandoned checkpoint")

// runStream runs windows windows on n ranks; every rank abandons the
// checkpoints of fail (window, c within the window) once, as a failure
// would, and rolls back to the last state it saved. It returns the
// counts each window's reduces produced (a window reduced again replaces
// its counts, as an idempotent sink would) and how often each was reduced.
func runStream(t *testing.T, cfg Windows, windows int, fail [][2]uint64) ([]map[string]uint64, []int) {
	const n = 3
	rts, _ := newJob(t, n, 5)
	shs := newShuffles(t, rts, nil)
	var mu sync.Mutex
	parts := make([][n]map[string]uint64, windows) // window, rank
	reduced := make([]int, windows)
	each(t, n, func(i int) error {
		ctx := context.Background()
		st, err := NewStream(shs[i], genSource{i}, cfg)
		if err != nil {
			return err
		}
		var saved []byte
		failed := map[[2]uint64]bool{}
		save := func(_ context.Context, b []byte) error {
			at := [2]uint64{binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[24:])}
			for _, f := range fail {
				if f == at && !failed[at] {
					failed[at] = true
					return errAbandon
				}
			}
			saved = append(saved[:0], b...)
			return nil
		}
		reduce := func(_ context.Context, w uint64, groups iter.Seq2[[]byte, iter.Seq[[]byte]]) error {
			m := map[string]uint64{}
			for k, vals := range groups {
				for v := range vals {
					c, _ := binary.Uvarint(v)
					m[string(k)] += c
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if i == 0 {
				reduced[w]++
			}
			parts[w][i] = m
			return nil
		}
		for st.Window() < uint64(windows) {
			err := st.Next(ctx, save, reduce)
			if errors.Is(err, errAbandon) {
				err = st.RollBack(ctx, saved)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	got := make([]map[string]uint64, windows)
	for w := range got {
		got[w] = map[string]uint64{}
		for _, m := range parts[w] {
			for k, c := range m {
				if _, dup := got[w][k]; dup {
					t.Fatalf("window %d: key %s reduced on two ranks", w, k)
				}
				got[w][k] = c
			}
		}
	}
	return got, reduced
}

// Windows end with the reference counts, and a failure mid-window (after
// a checkpoint was taken but not committed) or between a window's end
// and the next window's first checkpoint neither loses nor repeats a
// record.
func TestStreamExactlyOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Windows
	}{
		{"count", Windows{Records: 300, Checkpoints: 4}},
		{"time", Windows{Span: 250 * time.Millisecond, Start: t0, Checkpoints: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const windows = 5
			want := streamReference(3, c.cfg, windows)
			for _, fail := range [][][2]uint64{nil, {{2, 3}}, {{3, 1}, {1, 2}}} {
				got, reduced := runStream(t, c.cfg, windows, fail)
				for w := range windows {
					if !maps.Equal(got[w], want[w]) {
						t.Fatalf("failures %v: window %d: counts %v, want %v", fail, w, got[w], want[w])
					}
				}
				t.Logf("failures %v: reduces per window %v", fail, reduced)
				if fail != nil && reduced[2] != 2 && fail[0] == [2]uint64{3, 1} {
					t.Fatalf("a failure before window 3's first checkpoint: window 2 reduced %d times, want 2 (redone)", reduced[2])
				}
			}
		})
	}
}

func TestWindowsValidate(t *testing.T) {
	for _, w := range []Windows{{}, {Records: 5, Span: time.Second, Checkpoints: 1}, {Records: 5}, {Records: 2, Checkpoints: 3}} {
		if err := w.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", w, err)
		}
	}
}
