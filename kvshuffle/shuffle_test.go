package kvshuffle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/pgas"
)

// sendAll sends the pairs, then closes the send side.
func sendAll(s *Shuffle, pairs []kv) error {
	ctx := context.Background()
	for _, p := range pairs {
		if err := s.Send(ctx, []byte(p.k), []byte(p.v)); err != nil {
			return err
		}
	}
	return s.CloseSend(ctx)
}

// Property: for random inputs (duplicated keys, empty keys and values),
// every partition receives exactly the pairs the partitioner sends it,
// sorted by key, on every schedule.
func TestCommonSortProperty(t *testing.T) {
	for seed := range uint64(4) {
		for _, sc := range []Schedule{Diagonal, Naive} {
			t.Run(fmt.Sprintf("seed=%d/%v", seed, sc), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := rand.New(rand.NewPCG(seed, 11))
					n := 1 + r.IntN(4)
					rts, _ := newJob(t, n, int64(seed))
					shs := newShuffles(t, rts, func(c *Config) { c.Schedule = sc })
					inputs := make([][]kv, n)
					for i := range inputs {
						inputs[i] = randPairs(r, r.IntN(2500), 1+r.IntN(400), r.IntN(3)*60)
					}
					got := make([][]kv, n)
					each(t, n, func(i int) error {
						if err := sendAll(shs[i], inputs[i]); err != nil {
							return err
						}
						got[i] = collect(t, shs[i], nil)
						return nil
					})
					expectPartitioned(t, inputs, got, HashPartition)
					var sent, recv uint64
					for _, s := range shs {
						st := s.Stats()
						sent += st.PairsSent
						recv += st.PairsReceived
						if st.MaxInFlight > int64(LocalConfig().Slots) {
							t.Errorf("rank %d: %d frames in flight, Slots is %d", s.Rank(), st.MaxInFlight, LocalConfig().Slots)
						}
					}
					if sent != recv {
						t.Errorf("sent %d pairs, received %d", sent, recv)
					}
				})
			})
		}
	}
}

// Values up to 1 MiB cross frames of 16 KiB as pieces and come back whole,
// interleaved with small pairs to the same and other partitions.
func TestLargeValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 3)
		shs := newShuffles(t, rts, nil)
		inputs := make([][]kv, n)
		for i := range inputs {
			r := rand.New(rand.NewPCG(12, uint64(i)))
			inputs[i] = randPairs(r, 200, 30, 20)
			for j, size := range []int{16 << 10, 16<<10 - frameHeader - 3, 100 << 10, 1 << 20} {
				v := strings.Repeat(string(rune('a'+j)), size)
				at := r.IntN(len(inputs[i]) + 1)
				inputs[i] = slices.Insert(inputs[i], at, kv{fmt.Sprintf("big%d-%d", i, j), v})
			}
		}
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], nil)
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
	})
}

// Property: Groups yields every key once, in order, with exactly its
// values, whether the caller reads all values, some, or none.
func TestGroupsProperty(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const n = 3
				r := rand.New(rand.NewPCG(seed, 13))
				rts, _ := newJob(t, n, int64(seed))
				shs := newShuffles(t, rts, func(c *Config) { c.Mode = ModeMapReduce })
				inputs := make([][]kv, n)
				for i := range inputs {
					inputs[i] = randPairs(r, 1500, 60, 10)
				}
				// Reference: per partition, key -> sorted values.
				ref := make([]map[string][]string, n)
				for p := range ref {
					ref[p] = map[string][]string{}
				}
				for _, in := range inputs {
					for _, p := range in {
						part := HashPartition([]byte(p.k), n)
						ref[part][p.k] = append(ref[part][p.k], p.v)
					}
				}
				each(t, n, func(i int) error {
					if err := sendAll(shs[i], inputs[i]); err != nil {
						return err
					}
					var keys []string
					rr := rand.New(rand.NewPCG(seed, uint64(i)))
					for k, vals := range shs[i].Groups(context.Background()) {
						key := string(k)
						if len(keys) > 0 && keys[len(keys)-1] >= key {
							return fmt.Errorf("group %q after %q", key, keys[len(keys)-1])
						}
						keys = append(keys, key)
						want := ref[i][key]
						switch mode := rr.IntN(3); mode {
						case 0: // all values
							var got []string
							for v := range vals {
								got = append(got, string(v))
							}
							slices.Sort(got)
							slices.Sort(want)
							if !slices.Equal(got, want) {
								return fmt.Errorf("key %q: values %q, want %q", key, got, want)
							}
						case 1: // the first value only
							for v := range vals {
								if !slices.Contains(want, string(v)) {
									return fmt.Errorf("key %q: stray value %q", key, v)
								}
								break
							}
						}
						if string(k) != key {
							return fmt.Errorf("group key changed while reading values: %q -> %q", key, k)
						}
					}
					if err := shs[i].Err(); err != nil {
						return err
					}
					wantKeys := make([]string, 0, len(ref[i]))
					for k := range ref[i] {
						wantKeys = append(wantKeys, k)
					}
					slices.Sort(wantKeys)
					if !slices.Equal(keys, wantKeys) {
						return fmt.Errorf("%d groups, want %d", len(keys), len(wantKeys))
					}
					return nil
				})
			})
		})
	}
}

func u64(x uint64) []byte { return binary.LittleEndian.AppendUint64(nil, x) }

// Property: with a summing Combine, the per-key sums are those of the
// reference, and combining did reduce what was carried.
func TestCombineProperty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 4)
		sum := func(key []byte, vals [][]byte) [][]byte {
			var s uint64
			for _, v := range vals {
				s += binary.LittleEndian.Uint64(v)
			}
			return [][]byte{u64(s)}
		}
		shs := newShuffles(t, rts, func(c *Config) { c.Mode, c.Combine = ModeMapReduce, sum })
		ref := map[string]uint64{}
		inputs := make([][]kv, n)
		for i := range inputs {
			r := rand.New(rand.NewPCG(14, uint64(i)))
			for range 5000 {
				k := fmt.Sprintf("word%03d", r.IntN(150))
				x := uint64(r.IntN(1000))
				ref[k] += x
				inputs[i] = append(inputs[i], kv{k, string(u64(x))})
			}
		}
		got := make([]map[string]uint64, n)
		each(t, n, func(i int) error {
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = map[string]uint64{}
			for k, vals := range shs[i].Groups(context.Background()) {
				for v := range vals {
					got[i][string(k)] += binary.LittleEndian.Uint64(v)
				}
			}
			return shs[i].Err()
		})
		for k, want := range ref {
			p := HashPartition([]byte(k), n)
			if got[p][k] != want {
				t.Errorf("key %q: sum %d on partition %d, want %d", k, got[p][k], p, want)
			}
			delete(got[p], k)
		}
		for p := range got {
			if len(got[p]) != 0 {
				t.Errorf("partition %d: %d unexpected keys", p, len(got[p]))
			}
		}
		var sent, recv uint64
		for _, s := range shs {
			sent += s.Stats().PairsSent
			recv += s.Stats().PairsReceived
		}
		if recv*4 > sent {
			t.Errorf("Combine left %d of %d pairs", recv, sent)
		}
	})
}

// A custom Compare (reverse order) with a range partitioner over it: every
// partition is sorted by it and partitions are ordered.
func TestCustomCompareAndRange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		rts, _ := newJob(t, n, 5)
		rev := func(a, b []byte) int { return bytes.Compare(b, a) }
		var sample [][]byte
		inputs := make([][]kv, n)
		for i := range inputs {
			r := rand.New(rand.NewPCG(15, uint64(i)))
			inputs[i] = randPairs(r, 800, 1000, 8)
			for _, p := range inputs[i][:50] {
				sample = append(sample, []byte(p.k))
			}
		}
		slices.SortFunc(sample, rev)
		sp := [][]byte{sample[len(sample)/4], sample[len(sample)/2], sample[3*len(sample)/4]}
		part := RangePartitionerFunc(sp, rev)
		shs := newShuffles(t, rts, func(c *Config) { c.Compare, c.Partition = rev, part })
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], rev)
			return nil
		})
		expectPartitioned(t, inputs, got, part)
		var all []kv
		for _, g := range got {
			all = append(all, g...)
		}
		for i := 1; i < len(all); i++ {
			if rev([]byte(all[i-1].k), []byte(all[i].k)) > 0 {
				t.Fatalf("partitions out of order at %d: %q then %q", i, all[i-1].k, all[i].k)
			}
		}
	})
}

// The TeraSort recipe: sampled splitters, range partitioning, bytewise
// order; the concatenation of the partitions is globally sorted.
func TestSampledRangeGlobalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 6)
		inputs := make([][]kv, n)
		for i := range inputs {
			r := rand.New(rand.NewPCG(16, uint64(i)))
			for range 1500 {
				k := make([]byte, 10)
				for j := range k {
					k[j] = byte(r.Uint32())
				}
				inputs[i] = append(inputs[i], kv{string(k), "payload"})
			}
		}
		got := make([][]kv, n)
		var parts [n]func([]byte, int) int
		shs := make([]*Shuffle, n)
		each(t, n, func(i int) error {
			ctx := context.Background()
			var sample [][]byte
			for _, p := range inputs[i][:100] {
				sample = append(sample, []byte(p.k))
			}
			sp, err := SampleSplitters(ctx, rts[i], sample, n, nil)
			if err != nil {
				return err
			}
			parts[i] = RangePartitioner(sp)
			cfg := LocalConfig()
			cfg.Partition = parts[i]
			if shs[i], err = New(ctx, rts[i], cfg); err != nil {
				return err
			}
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], nil)
			return shs[i].Close()
		})
		expectPartitioned(t, inputs, got, parts[0])
		var all []kv
		for _, g := range got {
			if len(g) == 0 {
				t.Errorf("an empty partition: the splitters are poor")
			}
			all = append(all, g...)
		}
		if !slices.IsSortedFunc(all, func(a, b kv) int { return strings.Compare(a.k, b.k) }) {
			t.Fatalf("the concatenation of partitions is not sorted")
		}
	})
}

// Bipartite (ModeMapReduce) roles: O-only, A-only and both.
func TestBipartiteRoles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		rts, _ := newJob(t, n, 7)
		oRanks, aRanks := []int{0, 1, 2}, []int{3, 1}
		shs := newShuffles(t, rts, func(c *Config) { c.Mode, c.ORanks, c.ARanks = ModeMapReduce, oRanks, aRanks })
		inputs := make([][]kv, n)
		for _, i := range oRanks {
			inputs[i] = randPairs(rand.New(rand.NewPCG(17, uint64(i))), 700, 100, 12)
		}
		got := make([][]kv, 2)
		each(t, n, func(i int) error {
			s := shs[i]
			if s.IsO() != slices.Contains(oRanks, i) || s.IsA() != slices.Contains(aRanks, i) {
				return fmt.Errorf("roles O=%v A=%v", s.IsO(), s.IsA())
			}
			if s.IsO() {
				if err := sendAll(s, inputs[i]); err != nil {
					return err
				}
			} else if err := s.Send(context.Background(), nil, nil); !errors.Is(err, ErrNotOperator) {
				return fmt.Errorf("Send on an A-only rank: %v", err)
			}
			if s.IsA() {
				got[s.Partition()] = collect(t, s, nil)
			} else {
				for range s.Recv(context.Background()) {
				}
				if !errors.Is(s.Err(), ErrNotAggregator) {
					return fmt.Errorf("Recv on an O-only rank: %v", s.Err())
				}
			}
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
		if shs[3].Partition() != 0 || shs[1].Partition() != 1 || shs[0].Partition() != -1 || shs[0].Parts() != 2 {
			t.Fatalf("partition numbering: rank 3 -> %d, rank 1 -> %d", shs[3].Partition(), shs[1].Partition())
		}
	})
}

// Typed pairs with the natural order of int64 keys, negatives included.
func TestTyped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		rts, _ := newJob(t, n, 8)
		type val struct {
			Name string
			N    int
		}
		shs := newShuffles(t, rts, func(c *Config) {
			c.Mode = ModeMapReduce
			c.Compare = CompareTyped[int64]()
			c.Partition = func(k []byte, parts int) int { return 0 }
		})
		each(t, n, func(i int) error {
			ctx := context.Background()
			for k := int64(-300); k <= 300; k += 7 {
				if err := SendTyped(ctx, shs[i], k*int64(i+1), val{fmt.Sprint(i), int(k)}); err != nil {
					return err
				}
			}
			if err := shs[i].CloseSend(ctx); err != nil {
				return err
			}
			if i != 0 {
				return nil
			}
			prev, count := int64(-1<<62), 0
			for k, vals := range GroupsTyped[int64, val](ctx, shs[i]) {
				if k <= prev {
					return fmt.Errorf("key %d after %d", k, prev)
				}
				prev = k
				for v := range vals {
					count++
					if v.Name != "0" && v.Name != "1" {
						return fmt.Errorf("value %+v", v)
					}
				}
			}
			if count != 2*86 {
				return fmt.Errorf("%d values, want %d", count, 2*86)
			}
			return shs[i].Err()
		})
	})
}

func TestCallErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		rts, _ := newJob(t, n, 9)
		bad := false
		shs := newShuffles(t, rts, func(c *Config) {
			c.Partition = func(k []byte, parts int) int {
				if bad && len(k) == 3 {
					return parts
				}
				return 0
			}
		})
		ctx := context.Background()
		s := shs[0]
		if err := s.Send(ctx, make([]byte, 5<<20), nil); !errors.Is(err, ErrTooLarge) {
			t.Errorf("oversized pair: %v", err)
		}
		bad = true
		if err := s.Send(ctx, []byte("bad"), nil); !errors.Is(err, ErrPartition) {
			t.Errorf("partition out of range: %v", err)
		}
		if err := s.MarkConsumed(5); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkConsumed(4); !errors.Is(err, ErrState) || s.Consumed() != 5 {
			t.Errorf("MarkConsumed going back: %v, Consumed %d", err, s.Consumed())
		}
		each(t, n, func(i int) error { return shs[i].CloseSend(ctx) })
		if err := s.Send(ctx, []byte("k"), nil); !errors.Is(err, ErrSendClosed) {
			t.Errorf("Send after CloseSend: %v", err)
		}
		if err := s.CloseSend(ctx); err != nil {
			t.Errorf("second CloseSend: %v", err)
		}
		for range s.Recv(ctx) {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		for range s.Recv(ctx) {
		}
		if err := s.Err(); !errors.Is(err, ErrState) {
			t.Errorf("second Recv: %v", err)
		}
		if _, err := s.Checkpoint(ctx, 1); !errors.Is(err, ErrState) {
			t.Errorf("Checkpoint after Recv: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := s.Send(ctx, nil, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Send after Close: %v", err)
		}
	})
}

// A Recv whose senders never close times out with pgas.ErrTimeout.
func TestRecvTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 10)
		shs := newShuffles(t, rts, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 50e6)
		defer cancel()
		for range shs[0].Recv(ctx) {
		}
		if err := shs[0].Err(); !errors.Is(err, pgas.ErrTimeout) {
			t.Fatalf("Recv without senders closing: %v, want ErrTimeout", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	if c := DefaultConfig(); c.Validate() != nil {
		t.Fatalf("DefaultConfig: %v", c.Validate())
	}
	if c := LocalConfig(); c.Validate() != nil {
		t.Fatalf("LocalConfig: %v", c.Validate())
	}
	cases := map[string]func(c *Config){
		"Mode":          func(c *Config) { c.Mode = 7 },
		"ORanks/ARanks": func(c *Config) { c.ORanks = []int{0} },
		"ORanks":        func(c *Config) { c.Mode, c.ORanks = ModeMapReduce, []int{1, 1} },
		"ARanks":        func(c *Config) { c.Mode, c.ARanks = ModeMapReduce, []int{} },
		"CreditQueue":   func(c *Config) { c.CreditQueue = c.Queue },
		"MaxPosted":     func(c *Config) { c.MaxPosted = 1 },
		"SlotSize":      func(c *Config) { c.SlotSize = 100 },
		"Slots":         func(c *Config) { c.Slots = 0 },
		"SendBuffers":   func(c *Config) { c.SendBuffers = 1 },
		"MemoryBudget":  func(c *Config) { c.MemoryBudget = int64(c.SlotSize) },
		"RunSize":       func(c *Config) { c.RunSize = c.MemoryBudget },
		"MergeFanIn":    func(c *Config) { c.MergeFanIn = 1 },
		"IOBufferSize":  func(c *Config) { c.IOBufferSize = 10 },
		"MaxPairSize":   func(c *Config) { c.MaxPairSize = 2 },
		"Schedule":      func(c *Config) { c.Schedule = 9 },
	}
	for field, mut := range cases {
		c := LocalConfig()
		mut(&c)
		before := fmt.Sprintf("%+v", c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate = %v, want a ConfigError naming %s", field, err, field)
		}
		if fmt.Sprintf("%+v", c) != before {
			t.Errorf("%s: Validate changed the config", field)
		}
	}
	// Rank sets are checked against the job by New.
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 11)
		c := LocalConfig()
		c.Mode, c.ARanks = ModeMapReduce, []int{0, 5}
		if _, err := New(context.Background(), rts[0], c); !errors.Is(err, ErrConfig) {
			t.Errorf("ARanks outside the job: %v", err)
		}
	})
}

// Many ranks, few pairs each: every (sender, receiver) stream, including
// empty ones, is opened and closed correctly.
func TestManyRanks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 16
		rts, _ := newJob(t, n, 12)
		shs := newShuffles(t, rts, nil)
		inputs := make([][]kv, n)
		for i := range inputs {
			inputs[i] = randPairs(rand.New(rand.NewPCG(18, uint64(i))), i*7, 40, 5)
		}
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], nil)
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
	})
}
