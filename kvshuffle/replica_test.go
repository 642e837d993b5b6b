package kvshuffle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
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

// Rule (copies kept): a holder keeps a source's copies named by the
// manifests the source has not released, collects only the finished
// source's other copies (another source's files may be arriving, not named
// yet), and at RollBack to c forgets the manifests above c.
func TestReplicaStoreKeeps(t *testing.T) {
	rs := newReplicaStore()
	dir := t.TempDir()
	file := func(src uint32, n int) fileKey {
		k := fileKey{src: src, crc: uint32(n), size: int64(100 + n), pairs: uint64(n)}
		path := dir + "/" + k.name()
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		rs.add(k, path)
		return k
	}
	held := func(ks ...fileKey) {
		t.Helper()
		if len(rs.files) != len(ks) {
			t.Fatalf("holding %d copies, want %d", len(rs.files), len(ks))
		}
		for _, k := range ks {
			p, ok := rs.has(k)
			if !ok {
				t.Fatalf("copy %s gone", k.name())
			}
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("copy %s: %v", k.name(), err)
			}
		}
	}
	a1, a2 := file(0, 1), file(0, 2)
	rs.record(0, 0, manifest{c: 10, keys: []fileKey{a1, a2}})
	b1 := file(1, 1) // source 1's session under way
	a3 := file(0, 3)
	rs.record(0, 0, manifest{c: 20, keys: []fileKey{a2, a3}})
	held(a1, a2, a3, b1) // checkpoint 10 not released yet; b1 not source 0's
	rs.record(1, 0, manifest{c: 20, keys: []fileKey{b1}})
	a4 := file(0, 4)
	rs.record(0, 20, manifest{c: 30, keys: []fileKey{a4}}) // released below 20: 10 goes
	held(a2, a3, a4, b1)
	rs.rollBack(20) // checkpoint 30 abandoned
	held(a2, a3, b1)
	if rs.bytes != a2.size+a3.size+b1.size {
		t.Fatalf("bytes %d, want %d", rs.bytes, a2.size+a3.size+b1.size)
	}
	if err := rs.removeAll(); err != nil || len(rs.files) != 0 {
		t.Fatalf("removeAll: %v, %d copies left", err, len(rs.files))
	}
}

// A runtime closed under a shuffle (pgas Finalize) stops its goroutines
// with an error that is a shutdown, not a failure: nothing is logged at
// ERROR.
func TestRuntimeClosedIsNoFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 80)
		var buf syncBuffer
		shs := newShuffles(t, rts, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		for _, rt := range rts {
			rt.Close()
		}
		synctest.Wait()
		for i, s := range shs {
			if s.Err() == nil {
				t.Fatalf("rank %d: the shuffle did not notice that the runtime closed", i)
			}
		}
		if out := buf.String(); strings.Contains(out, "level=ERROR") || !strings.Contains(out, "the runtime closed") {
			t.Fatalf("log after the runtime closed:\n%s", out)
		}
	})
}

// syncBuffer is a bytes.Buffer for several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
