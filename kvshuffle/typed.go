package kvshuffle

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"iter"

	"github.com/vmihailenco/msgpack/v5"
)

// Typed keys and values are encoded with msgpack (map keys sorted, so
// that equal values give equal bytes and group together). This is for
// convenience; bulk payloads should use Send with bytes, which never goes
// through an encoder.
//
// Order: by default keys sort by their encoded bytes. That groups equal
// keys correctly but is not the natural order of numbers (msgpack puts
// negative integers after positive ones); set Config.Compare to
// CompareTyped[K]() for the natural order of an ordered key type.

func encodeTyped(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SendTyped encodes key and value with msgpack and sends them.
func SendTyped[K, V any](ctx context.Context, s *Shuffle, key K, value V) error {
	kb, err := encodeTyped(key)
	if err != nil {
		return fmt.Errorf("kvshuffle: send typed: key: %w", err)
	}
	vb, err := encodeTyped(value)
	if err != nil {
		return fmt.Errorf("kvshuffle: send typed: value: %w", err)
	}
	return s.Send(ctx, kb, vb)
}

// RecvTyped is Recv with msgpack-decoded keys and values. A pair that
// does not decode into K and V stops the iteration; Err reports it.
func RecvTyped[K, V any](ctx context.Context, s *Shuffle) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for kb, vb := range s.Recv(ctx) {
			var k K
			var v V
			if err := msgpack.Unmarshal(kb, &k); err != nil {
				s.setRecvErr(fmt.Errorf("kvshuffle: recv typed: key: %w", err))
				return
			}
			if err := msgpack.Unmarshal(vb, &v); err != nil {
				s.setRecvErr(fmt.Errorf("kvshuffle: recv typed: value: %w", err))
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// GroupsTyped is Groups with msgpack-decoded keys and values. A key or
// value that does not decode stops the iteration; Err reports it.
func GroupsTyped[K, V any](ctx context.Context, s *Shuffle) iter.Seq2[K, iter.Seq[V]] {
	return func(yield func(K, iter.Seq[V]) bool) {
		stop := false
		for kb, vals := range s.Groups(ctx) {
			var k K
			if err := msgpack.Unmarshal(kb, &k); err != nil {
				s.setRecvErr(fmt.Errorf("kvshuffle: groups typed: key: %w", err))
				return
			}
			typed := func(yv func(V) bool) {
				for vb := range vals {
					var v V
					if err := msgpack.Unmarshal(vb, &v); err != nil {
						s.setRecvErr(fmt.Errorf("kvshuffle: groups typed: value: %w", err))
						stop = true
						return
					}
					if !yv(v) {
						return
					}
				}
			}
			if !yield(k, typed) || stop {
				return
			}
		}
	}
}

// CompareTyped returns a Compare for msgpack-encoded keys of type K in
// their natural order. Keys that do not decode sort after those that do,
// by bytes. It decodes both keys on every comparison: prefer an
// order-preserving byte encoding for large sorts.
func CompareTyped[K cmp.Ordered]() func(a, b []byte) int {
	return func(a, b []byte) int {
		var x, y K
		ea, eb := msgpack.Unmarshal(a, &x), msgpack.Unmarshal(b, &y)
		switch {
		case ea == nil && eb == nil:
			return cmp.Compare(x, y)
		case ea == nil:
			return -1
		case eb == nil:
			return 1
		}
		return bytes.Compare(a, b)
	}
}
