package kvshuffle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// records is an O task's input: record j produces 1 to 3 pairs whose
// values name the record, so a lost or duplicated pair is visible.
func records(rank, n, pad int, r *rand.Rand) [][]kv {
	out := make([][]kv, n)
	for j := range out {
		for p := range 1 + r.IntN(3) {
			k := fmt.Sprintf("k%04d", r.IntN(300))
			out[j] = append(out[j], kv{k, fmt.Sprintf("r%d.%d.%d%*s", rank, j, p, pad, "")})
		}
	}
	return out
}

// sendRecords sends records [from, to) and marks each consumed.
func sendRecords(s *Shuffle, recs [][]kv, from, to int) error {
	ctx := context.Background()
	for j := from; j < to; j++ {
		for _, p := range recs[j] {
			if err := s.Send(ctx, []byte(p.k), []byte(p.v)); err != nil {
				return err
			}
		}
		if err := s.MarkConsumed(uint64(j + 1)); err != nil {
			return err
		}
	}
	return nil
}

// Rule (key-count checkpoint): after RollBack to checkpoint c, resending
// from each O task's Consumed count gives exactly the failure-free result:
// no pair lost, none duplicated. Variants roll back with data in flight,
// after CloseSend, after Recv, twice to the same checkpoint, and with
// spill files in the state.
func TestRollBackResend(t *testing.T) {
	type variant struct {
		name   string
		spill  bool
		after  string // what happens between the checkpoint and the roll back
		twice  bool
		cspill bool // Config.CheckpointSpill: the state names files only
	}
	variants := []variant{
		{name: "in-flight", after: "send"},
		{name: "after-close", after: "close"},
		{name: "after-recv", after: "recv"},
		{name: "twice", after: "send", twice: true},
		{name: "spill", spill: true, after: "send"},
		{name: "spill-after-recv", spill: true, after: "recv", twice: true},
		{name: "to-start", after: "send"},
		{name: "ckpt-spill", spill: true, cspill: true, after: "send"},
		{name: "ckpt-spill-after-recv", spill: true, cspill: true, after: "recv", twice: true},
	}
	for vi, v := range variants {
		for seed := range uint64(2) {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n, nrec = 3, 600
					rts, _ := newJob(t, n, int64(seed)+40)
					shs := newShuffles(t, rts, func(c *Config) {
						c.Mode = ModeMapReduce
						if v.spill {
							spillConfig(t.TempDir())(c)
							c.MergeFanIn = 4
						}
						c.CheckpointSpill = v.cspill
					})
					recs := make([][][]kv, n)
					var inputs [][]kv
					pad := 0
					if v.spill {
						pad = 100
					}
					for i := range n {
						recs[i] = records(i, nrec, pad, rand.New(rand.NewPCG(seed, uint64(vi*10+i))))
						for _, rec := range recs[i] {
							inputs = append(inputs, rec)
						}
					}
					states := make([][]byte, n)
					got := make([][]kv, n)
					each(t, n, func(i int) error {
						ctx := context.Background()
						s := shs[i]
						r := rand.New(rand.NewPCG(seed, uint64(100+i)))
						c1 := r.IntN(nrec / 2)
						if err := sendRecords(s, recs[i], 0, c1); err != nil {
							return err
						}
						st, err := s.Checkpoint(ctx, 1)
						if err != nil {
							return err
						}
						if v.cspill && len(st) > 4096 {
							return fmt.Errorf("checkpoint state of %d bytes with CheckpointSpill: the in-memory data went into it", len(st))
						}
						if v.name != "to-start" {
							states[i] = st
						}
						if s.Consumed() != uint64(c1) {
							return fmt.Errorf("consumed %d after the checkpoint, want %d", s.Consumed(), c1)
						}
						rounds := 1
						if v.twice {
							rounds = 2
						}
						for range rounds {
							// Work after the checkpoint that the roll back discards.
							c2 := int(s.Consumed()) + r.IntN(nrec-int(s.Consumed()))
							if v.after != "send" {
								c2 = nrec
							}
							if err := sendRecords(s, recs[i], int(s.Consumed()), c2); err != nil {
								return err
							}
							if v.after == "close" || v.after == "recv" {
								if err := s.CloseSend(ctx); err != nil {
									return err
								}
							}
							if v.after == "recv" {
								for range s.Recv(ctx) {
								}
								if err := s.Err(); err != nil {
									return err
								}
							}
							if err := s.RollBack(ctx, states[i]); err != nil {
								return err
							}
							want := uint64(c1)
							if states[i] == nil {
								want = 0
							}
							if s.Consumed() != want {
								return fmt.Errorf("consumed %d after roll back, want %d", s.Consumed(), want)
							}
						}
						got[i], err = finishSend(t, s, recs[i])
						return err
					})
					expectPartitioned(t, inputs, got, HashPartition)
					for i, s := range shs {
						if v.spill && s.Stats().Spills == 0 {
							t.Errorf("rank %d never spilled", i)
						}
					}
				})
			})
		}
	}
}

// Rule (a rejoin runs alone): after a rank was replaced (a new epoch),
// RollBack stops the pump, drain and merger of the abandoned timeline
// before it rejoins the segment, so the runtime's new mappings of the
// peers' memory are never made beside them; the resend after it still
// gives the failure-free result. The new epoch is simulated: every rank's
// shuffle forgets the epoch it created the segment in, so every rank
// rejoins (the rejoin keeps the segment's memory).
func TestRollBackRejoinsWithWorkersStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, nrec = 3, 400
		rts, _ := newJob(t, n, 61)
		shs := newShuffles(t, rts, func(c *Config) {
			c.Mode = ModeMapReduce
			spillConfig(t.TempDir())(c)
			c.MergeFanIn = 4
		})
		var mu sync.Mutex
		var seen []string
		testHookRejoin = func(s *Shuffle) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("rank %d: %d running", s.rank, s.workers.Load()))
		}
		defer func() { testHookRejoin = nil }()
		recs := make([][][]kv, n)
		var inputs [][]kv
		for i := range n {
			recs[i] = records(i, nrec, 100, rand.New(rand.NewPCG(61, uint64(i))))
			inputs = append(inputs, recs[i]...)
		}
		states := make([][]byte, n)
		ctx := context.Background()
		each(t, n, func(i int) error {
			s := shs[i]
			if err := sendRecords(s, recs[i], 0, nrec/3); err != nil {
				return err
			}
			var err error
			if states[i], err = s.Checkpoint(ctx, 1); err != nil {
				return err
			}
			// Work the roll back discards.
			return sendRecords(s, recs[i], nrec/3, 2*nrec/3)
		})
		for _, s := range shs {
			s.opMu.Lock()
			s.epoch = ^uint64(0)
			s.opMu.Unlock()
		}
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			s := shs[i]
			if err := s.RollBack(ctx, states[i]); err != nil {
				return err
			}
			var err error
			got[i], err = finishSend(t, s, recs[i])
			return err
		})
		expectPartitioned(t, inputs, got, HashPartition)
		slices.Sort(seen)
		if want := []string{"rank 0: 0 running", "rank 1: 0 running", "rank 2: 0 running"}; !slices.Equal(seen, want) {
			t.Fatalf("at the rejoin: %v, want %v", seen, want)
		}
	})
}

// Rule (asynchronous checkpoint): with Mark, the O tasks send on at once
// while another goroutine takes the states (State, in order) as the
// checkpoints complete; rolling back to the last state taken and
// resending from Consumed gives exactly the failure-free result. Senders
// reach later checkpoints before earlier ones are complete; the cut of a
// checkpoint never takes data sent after it, whether its in-memory data
// is spilled (CheckpointSpill, with spills under memory pressure at the
// same time) or carried in the state.
func TestAsyncCheckpoint(t *testing.T) {
	for _, v := range []struct {
		name          string
		spill, cspill bool
		small         bool // blocks of one frame in a larger budget: many post blocks
	}{
		{"in-memory", false, false, false},
		{"spill", true, false, false},
		{"ckpt-spill", true, true, false},
		{"post-blocks", true, true, true},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed=%d", v.name, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const n, nrec, marks = 3, 900, 4
					rts, _ := newJob(t, n, int64(seed)+60)
					shs := newShuffles(t, rts, func(c *Config) {
						c.Mode = ModeMapReduce
						if v.spill {
							spillConfig(t.TempDir())(c)
							c.MergeFanIn = 4
						}
						c.CheckpointSpill = v.cspill
						if v.small {
							c.RunSize, c.MemoryBudget = int64(c.SlotSize), 256<<10
						}
					})
					recs := make([][][]kv, n)
					var inputs [][]kv
					for i := range n {
						recs[i] = records(i, nrec, 60, rand.New(rand.NewPCG(seed, uint64(70+i))))
						for _, rec := range recs[i] {
							inputs = append(inputs, rec)
						}
					}
					// The same checkpoint positions on every rank, as
					// the key counts of a real job are.
					r := rand.New(rand.NewPCG(seed, 99))
					at := make([]int, marks)
					for k := range at {
						at[k] = r.IntN(nrec * 3 / 4)
					}
					slices.Sort(at)
					stop := at[marks-1] + r.IntN(nrec-at[marks-1]) // sent before the failure
					got := make([][]kv, n)
					each(t, n, func(i int) error {
						ctx := context.Background()
						s := shs[i]
						type res struct {
							st  []byte
							err error
						}
						states := make(chan res, marks)
						marked := make(chan uint64, marks)
						go func() { // the committer
							for c := range marked {
								st, err := s.State(ctx, c)
								states <- res{st, err}
							}
						}()
						defer close(marked)
						from := 0
						for k := range marks {
							if err := sendRecords(s, recs[i], from, at[k]); err != nil {
								return err
							}
							from = at[k]
							if err := s.Mark(ctx, uint64(k+1)); err != nil {
								return err
							}
							marked <- uint64(k + 1)
						}
						if err := sendRecords(s, recs[i], from, stop); err != nil {
							return err
						}
						var last []byte
						for range marks {
							r := <-states
							if r.err != nil {
								return r.err
							}
							last = r.st
						}
						if v.cspill && len(last) > 4096 {
							return fmt.Errorf("checkpoint state of %d bytes with CheckpointSpill: the in-memory data went into it", len(last))
						}
						if err := s.RollBack(ctx, last); err != nil {
							return err
						}
						if s.Consumed() != uint64(at[marks-1]) {
							return fmt.Errorf("consumed %d after roll back, want %d", s.Consumed(), at[marks-1])
						}
						var err error
						got[i], err = finishSend(t, s, recs[i])
						return err
					})
					expectPartitioned(t, inputs, got, HashPartition)
					for i, s := range shs {
						if v.spill && s.Stats().Spills == 0 {
							t.Errorf("rank %d never spilled", i)
						}
					}
				})
			})
		}
	}
}

// A checkpoint taken after every O task closed holds the complete
// shuffle: rolling back to it needs no resend.
func TestCheckpointAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 50)
		shs := newShuffles(t, rts, spillConfig(t.TempDir()))
		inputs := make([][]kv, n)
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			ctx := context.Background()
			inputs[i] = randPairs(rand.New(rand.NewPCG(51, uint64(i))), 3000, 500, 50)
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			st, err := shs[i].Checkpoint(ctx, 7)
			if err != nil {
				return err
			}
			for range shs[i].Recv(ctx) {
			}
			if err := shs[i].RollBack(ctx, st); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], nil)
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
	})
}

// Ranks that roll back to different checkpoints, or with a damaged state,
// all get an error and nothing changes; a correct roll back then works.
func TestRollBackMismatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 52)
		shs := newShuffles(t, rts, nil)
		s1, s2 := make([][]byte, n), make([][]byte, n)
		inputs := make([][]kv, n)
		each(t, n, func(i int) error {
			ctx := context.Background()
			inputs[i] = randPairs(rand.New(rand.NewPCG(53, uint64(i))), 500, 100, 10)
			var err error
			for j, p := range inputs[i] {
				if err := shs[i].Send(ctx, []byte(p.k), []byte(p.v)); err != nil {
					return err
				}
				shs[i].MarkConsumed(uint64(j + 1))
				switch j {
				case 100:
					s1[i], err = shs[i].Checkpoint(ctx, 1)
				case 200:
					s2[i], err = shs[i].Checkpoint(ctx, 2)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		mixed := slices.Clone(s2)
		mixed[1] = s1[1]
		errs := make([]error, n)
		each(t, n, func(i int) error {
			errs[i] = shs[i].RollBack(context.Background(), mixed[i])
			return nil
		})
		for i, err := range errs {
			if !errors.Is(err, ErrMismatch) {
				t.Errorf("rank %d, mixed checkpoints: %v, want ErrMismatch", i, err)
			}
		}
		damaged := slices.Clone(s2)
		damaged[2] = slices.Clone(s2[2])
		damaged[2][len(damaged[2])/2] ^= 1
		each(t, n, func(i int) error {
			errs[i] = shs[i].RollBack(context.Background(), damaged[i])
			return nil
		})
		for i, err := range errs {
			want := ErrMismatch
			if i == 2 {
				want = ErrCorrupt
			}
			if !errors.Is(err, want) {
				t.Errorf("rank %d, damaged state: %v, want %v", i, err, want)
			}
		}
		other := slices.Clone(s2)
		other[0], other[1] = s2[1], s2[0]
		each(t, n, func(i int) error {
			errs[i] = shs[i].RollBack(context.Background(), other[i])
			return nil
		})
		for i, err := range errs {
			if !errors.Is(err, ErrMismatch) {
				t.Errorf("rank %d, swapped states: %v, want ErrMismatch", i, err)
			}
		}
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			s := shs[i]
			if err := s.RollBack(context.Background(), s2[i]); err != nil {
				return err
			}
			if s.Consumed() != 201 {
				return fmt.Errorf("consumed %d, want 201", s.Consumed())
			}
			if err := sendAll(s, inputs[i][s.Consumed():]); err != nil {
				return err
			}
			got[i] = collect(t, s, nil)
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
	})
}

// FuzzDecodeState: states are checked before use; damaged bytes are
// ErrCorrupt, never a panic or an out-of-bounds read. The fuzzer mutates
// the body and the checksum is recomputed, so that the decoder behind it
// is reached; a wrong checksum is checked separately.
func FuzzDecodeState(f *testing.F) {
	st := &state{c: 3, rank: 1, size: 2, nSrc: 2, nParts: 2, flags: 3, consumed: 9, ended: []bool{true, false},
		files: []stateFile{{path: "/tmp/x.kvs", size: 40, pairs: 2, crc: 7}},
		runs:  []stateRun{{sorted: true, data: AppendPair(nil, []byte("a"), []byte("b"))}}}
	body := func(b []byte) []byte { return b[:len(b)-4] }
	f.Add(body(st.encode([][]byte{AppendPair(nil, []byte("z"), nil)})))
	f.Add(body((&state{flags: 1}).encode(nil)))
	f.Add([]byte("KVSSTATE"))
	good := st.encode(nil)
	good[len(good)-1] ^= 1
	if _, err := decodeState(good); !errors.Is(err, ErrCorrupt) {
		f.Fatalf("wrong checksum accepted: %v", err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = binary.LittleEndian.AppendUint32(slices.Clip(b), crc32.Checksum(b, castagnoli))
		st, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		for _, r := range st.runs {
			if _, err := DecodeRun(r.data, nil); err != nil {
				t.Fatalf("accepted a state with a bad run: %v", err)
			}
		}
		if st.flags&2 != 0 && len(st.ended) != int(st.nSrc) {
			t.Fatalf("A state with %d end flags for %d O tasks", len(st.ended), st.nSrc)
		}
		var unsorted [][]byte
		var runs []stateRun
		for i, r := range st.runs {
			if !r.sorted && i == len(st.runs)-1 {
				unsorted = [][]byte{r.data}
				continue
			}
			runs = append(runs, r)
		}
		if !r2(st, runs, unsorted, b) {
			t.Fatalf("state does not re-encode to its bytes")
		}
	})
}

// r2 reports whether st, with its runs split as encode expects, encodes
// to b (an unsorted run not in last place cannot be re-encoded; skip).
func r2(st *state, runs []stateRun, unsorted [][]byte, b []byte) bool {
	for _, r := range runs {
		if !r.sorted {
			return true
		}
	}
	cp := *st
	cp.runs = runs
	if len(unsorted) == 1 && len(unsorted[0]) == 0 {
		return true // an empty unsorted run is not written
	}
	return bytes.Equal(cp.encode(unsorted), b)
}

// Rule (blocks reused across roll backs): RollBack returns the abandoned
// timeline's receive blocks to the pool, so that a job rolled back again
// and again receives into the same blocks instead of new ones (whose
// memory the runtime would zero again, all of it resident): the blocks
// allocated over six rounds of send-and-roll-back stay within twice one
// round's, and the result is the failure-free one.
func TestRollBackReusesBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, nrec, rounds = 3, 4000, 6
		rts, _ := newJob(t, n, 77)
		shs := newShuffles(t, rts, func(c *Config) { c.Mode = ModeMapReduce })
		recs := make([][][]kv, n)
		var inputs [][]kv
		for i := range n {
			recs[i] = records(i, nrec, 300, rand.New(rand.NewPCG(7, uint64(i))))
			inputs = append(inputs, recs[i]...)
		}
		first := make([]uint64, n)
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			ctx := context.Background()
			s := shs[i]
			for round := range rounds {
				if err := sendRecords(s, recs[i], 0, nrec); err != nil {
					return err
				}
				if err := s.CloseSend(ctx); err != nil {
					return err
				}
				// Every rank has received everything before any rolls back.
				if err := s.rt.Barrier(ctx, nil); err != nil {
					return err
				}
				if err := s.RollBack(ctx, nil); err != nil {
					return err
				}
				if round == 0 {
					first[i] = s.Stats().Blocks
				}
			}
			var err error
			got[i], err = finishSend(t, s, recs[i])
			return err
		})
		expectPartitioned(t, inputs, got, HashPartition)
		for i, s := range shs {
			blocks := s.Stats().Blocks
			t.Logf("rank %d: %d blocks in the first round, %d after %d roll backs", i, first[i], blocks, rounds)
			if first[i] < 3 {
				t.Fatalf("rank %d received into %d blocks in a round: too little data to tell reuse", i, first[i])
			}
			if blocks > 2*first[i] {
				t.Errorf("rank %d allocated %d receive blocks over %d rounds, %d in the first: the roll backs dropped their blocks", i, blocks, rounds, first[i])
			}
		}
	})
}
