package kvshuffle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/ckpt"
)

// newHostJob starts len(hosts) ranks over one in-memory network, rank r
// labelled hosts[r] (pgas Config.Hosts), each with its own spill
// directory, and a shuffle on every rank whose Holders are ckpt's
// placement with one mirror.
func newHostJob(t *testing.T, hosts []string, seed int64, cspill bool) ([]*Shuffle, []string) {
	t.Helper()
	n := len(hosts)
	rts, _ := newJobOn(t, n, seed, hosts)
	place := ckpt.Place(hosts, 1)
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	shs := newShufflesEach(t, rts, func(i int) Config {
		cfg := LocalConfig()
		spillConfig(dirs[i])(&cfg)
		cfg.CheckpointSpill = cspill
		cfg.Holders = func(r int) []int { return place[r] }
		return cfg
	})
	return shs, dirs
}

// Rule (host loss): with ranks on different hosts, a checkpoint copies the
// spill files its state names to the rank's mirror holder on another host.
// When the rank's spill directory is lost after the checkpoint (its host
// died), RollBack fetches the files from the holder, and resending from
// Consumed gives exactly the failure-free result. This holds with states
// that name files only (CheckpointSpill) and with states that carry the
// in-memory data next to files spilled under memory pressure.
func TestHostLossFetchesCopies(t *testing.T) {
	for _, cspill := range []bool{true, false} {
		for _, lost := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("checkpoint-spill=%v/lost=%d", cspill, lost), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					hosts := []string{"hostA", "hostB", "hostC"}
					const n, nrec = 3, 1200
					shs, dirs := newHostJob(t, hosts, 60+int64(lost), cspill)
					recs := make([][][]kv, n)
					var inputs [][]kv
					for i := range n {
						recs[i] = records(i, nrec, 100, rand.New(rand.NewPCG(uint64(lost), uint64(i))))
						inputs = append(inputs, recs[i]...)
					}
					states := make([][]byte, n)
					ctx := context.Background()
					// Two checkpoints, the first released, then work that the
					// roll back discards.
					each(t, n, func(i int) error {
						s := shs[i]
						for c := 1; c <= 2; c++ {
							if err := sendRecords(s, recs[i], int(s.Consumed()), c*nrec/4); err != nil {
								return err
							}
							st, err := s.Checkpoint(ctx, uint64(c))
							if err != nil {
								return err
							}
							states[i] = st
							s.Release(uint64(c))
						}
						return sendRecords(s, recs[i], int(s.Consumed()), 3*nrec/4)
					})
					var held int64
					for i, s := range shs {
						st := s.Stats()
						if st.Spills == 0 || st.CopiedFiles == 0 || st.CopiedBytes == 0 {
							t.Fatalf("rank %d: spills %d, copied %d files (%d bytes): want spills copied to the holder", i, st.Spills, st.CopiedFiles, st.CopiedBytes)
						}
						held += st.HeldBytes
					}
					// Holders keep the files of the unreleased checkpoint 2 only.
					var named int64
					for i := range n {
						dec, err := decodeState(states[i])
						if err != nil {
							t.Fatal(err)
						}
						for _, f := range dec.files {
							named += f.size
						}
					}
					if held != named {
						t.Fatalf("holders keep %d bytes of copies, checkpoint 2 names %d", held, named)
					}
					// The host of rank lost goes: its spill directory (its own
					// files and the copies it held) with it. Its merger may
					// still be spilling the work after the checkpoint; wait
					// until every goroutine is idle.
					synctest.Wait()
					if err := os.RemoveAll(dirs[lost]); err != nil {
						t.Fatal(err)
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
					for i, s := range shs {
						st := s.Stats()
						if i == lost && st.FetchedFiles == 0 {
							t.Errorf("rank %d lost its files but fetched none", i)
						}
						if i != lost && st.FetchedFiles != 0 {
							t.Errorf("rank %d kept its files but fetched %d", i, st.FetchedFiles)
						}
					}
				})
			})
		}
	}
}

// Rule (same host): with every rank on one host, files are kept by
// reference (nothing is copied: the host's loss would take the holder
// too), and a spill directory lost anyway is reported as ErrLost by every
// rank's RollBack.
func TestSameHostKeepsFilesByReference(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, nrec = 3, 400
		shs, dirs := newHostJob(t, []string{"h", "h", "h"}, 70, true)
		recs := make([][][]kv, n)
		for i := range n {
			recs[i] = records(i, nrec, 100, rand.New(rand.NewPCG(7, uint64(i))))
		}
		states := make([][]byte, n)
		ctx := context.Background()
		each(t, n, func(i int) error {
			if err := sendRecords(shs[i], recs[i], 0, nrec/2); err != nil {
				return err
			}
			var err error
			states[i], err = shs[i].Checkpoint(ctx, 1)
			return err
		})
		for i, s := range shs {
			if st := s.Stats(); st.CopiedBytes != 0 || st.HeldBytes != 0 {
				t.Fatalf("rank %d copied %d bytes and holds %d on one host", i, st.CopiedBytes, st.HeldBytes)
			}
		}
		synctest.Wait()
		if err := os.RemoveAll(dirs[1]); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, n)
		each(t, n, func(i int) error {
			errs[i] = shs[i].RollBack(ctx, states[i])
			return nil
		})
		for i, err := range errs {
			if !errors.Is(err, ErrLost) {
				t.Errorf("rank %d: RollBack after the loss of files kept by reference: %v, want ErrLost", i, err)
			}
		}
	})
}
