package kvshuffle

import (
	"context"
	"fmt"
	"iter"
	"slices"
)

// openRecv waits until every O task has ended its stream and the merger
// has prepared the final merge, then opens the merge.
func (s *Shuffle) openRecv(ctx context.Context, op string) (*mergeIter, error) {
	a := s.a
	if a == nil {
		return nil, fmt.Errorf("kvshuffle: %s on rank %d: %w", op, s.rank, ErrNotAggregator)
	}
	for {
		if err := s.usable(); err != nil {
			return nil, err
		}
		a.mu.Lock()
		if a.recvStarted {
			a.mu.Unlock()
			return nil, fmt.Errorf("kvshuffle: %s: the received pairs were already read: %w", op, ErrState)
		}
		if a.final {
			break
		}
		ch := a.changed
		a.mu.Unlock()
		if err := s.waitOn(ctx, ch, op); err != nil {
			return nil, err
		}
	}
	defer a.mu.Unlock()
	a.recvStarted = true
	var srcs []source
	for _, r := range a.runs {
		srcs = append(srcs, &runSource{data: r.data})
	}
	for _, b := range a.sealed { // the builder is empty: final sealed it
		for _, c := range b.chunks {
			srcs = append(srcs, &chunkSource{c: c}) // sorted: final waits for the merger
		}
	}
	for _, f := range a.files {
		fsrc, err := openSpill(f, s.cfg.IOBufferSize, s.cfg.MaxPairSize)
		if err != nil {
			for _, x := range srcs {
				x.close()
			}
			return nil, err
		}
		srcs = append(srcs, fsrc)
	}
	return newMerge(s.ord, srcs), nil
}

// finishRecv closes the merge and frees what it read.
func (s *Shuffle) finishRecv(m *mergeIter) {
	if err := m.close(); err != nil {
		s.setRecvErr(err)
	}
	if m.err != nil {
		s.setRecvErr(m.err)
	}
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range slices.Clone(a.files) {
		a.dropFileLocked(f)
	}
	a.recycleLocked(a.sealed)
	a.runs, a.sealed, a.builder, a.open, a.unsorted = nil, nil, &batch{}, nil, nil
	a.post, a.postOpen = nil, nil
	a.mem = 0
	a.signalLocked()
}

// Recv returns the pairs this A task received, sorted by Compare (pairs
// with equal keys in no specified order). Ranging over it blocks until
// every O task has called CloseSend and its data is here. key and value
// are valid only until the next iteration. It may be ranged over once:
// the data is freed as the iteration ends, so stopping early discards the
// rest. Check Err afterwards (ErrNotAggregator, ErrState, a timeout of
// ctx, a failure of the shuffle).
func (s *Shuffle) Recv(ctx context.Context) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		defer phase("shuffle", "shuffle receive")()
		m, err := s.openRecv(ctx, "recv")
		if err != nil {
			s.setRecvErr(err)
			return
		}
		defer s.finishRecv(m)
		for m.next() {
			if !yield(m.key, m.val) {
				return
			}
		}
	}
}

// Groups returns the received pairs grouped by key: each key once, in
// Compare order, with an iterator over its values. The key is valid until
// the next group; each value until the next value. Values not consumed are
// skipped. Like Recv it may be ranged over once; check Err afterwards.
func (s *Shuffle) Groups(ctx context.Context) iter.Seq2[[]byte, iter.Seq[[]byte]] {
	return func(yield func([]byte, iter.Seq[[]byte]) bool) {
		defer phase("shuffle", "shuffle receive")()
		m, err := s.openRecv(ctx, "groups")
		if err != nil {
			s.setRecvErr(err)
			return
		}
		defer s.finishRecv(m)
		var key []byte
		ok := m.next()
		for ok {
			key = append(key[:0], m.key...)
			in := true
			step := func() {
				ok = m.next()
				in = ok && s.ord.compare(m.key, key) == 0
			}
			vals := func(yv func([]byte) bool) {
				for in {
					more := yv(m.val)
					step()
					if !more {
						return
					}
				}
			}
			if !yield(key, vals) {
				return
			}
			for in {
				step()
			}
		}
	}
}
