package kvshuffle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// skewedDigests: rank 0 holds the large values of keys big0..big5 (and
// rank 1 a little of them); every rank holds small pairs of keys s0..s99.
func skewedDigests() []*Digest {
	ds := []*Digest{NewDigest(), NewDigest(), NewDigest()}
	for i := range 6 {
		k := fmt.Appendf(nil, "big%d", i)
		for range 20 {
			ds[0].Add(k, 10000)
		}
		ds[1].Add(k, 100)
	}
	for r, d := range ds {
		for i := range 100 {
			d.Add(fmt.Appendf(nil, "s%d", i), 10+r)
		}
	}
	return ds
}

func encodeAll(ds []*Digest, c RouteConfig) [][]byte {
	out := make([][]byte, len(ds))
	for i, d := range ds {
		out[i] = d.encode(c)
	}
	return out
}

// The large keys stay on rank 0 while its load is within the bound; the
// rest balance the load; the table is a function of the digests.
func TestRouteTable(t *testing.T) {
	c := DefaultRouteConfig()
	c.HeavyKeys = 8
	c.Buckets = 64
	c.Slack = 0.2
	ds := skewedDigests()
	tab, err := routeTable(encodeAll(ds, c), []int{0, 1, 2}, c)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := routeTable(encodeAll(ds, c), []int{0, 1, 2}, c)
	if !bytes.Equal(tab.Encode(), again.Encode()) {
		t.Fatal("two tables from the same digests differ")
	}
	// 6 big keys of 200 kB each (1.2 MB of ~1.23 MB): the bound is 1.2*total/3
	// (~490 kB), so two stay on rank 0 and the others go elsewhere.
	onZero := 0
	for i := range 6 {
		if tab.Partition(fmt.Appendf(nil, "big%d", i), 3) == 0 {
			onZero++
		}
	}
	if onZero != 2 {
		t.Fatalf("%d big keys stay on rank 0, want 2 (the balance bound)", onZero)
	}
	// Without a binding bound, all of them stay.
	c.Slack = 10
	loose, _ := routeTable(encodeAll(ds, c), []int{0, 1, 2}, c)
	for i := range 6 {
		if p := loose.Partition(fmt.Appendf(nil, "big%d", i), 3); p != 0 {
			t.Fatalf("big%d routed to %d with a loose bound, want 0 (where its bytes are)", i, p)
		}
	}
	if loose.Moved >= tab.Moved || loose.Kept+loose.Moved != tab.Kept+tab.Moved {
		t.Fatalf("moved %d (loose) vs %d (bound), kept %d vs %d", loose.Moved, tab.Moved, loose.Kept, tab.Kept)
	}
}

func TestRouteTableEncoding(t *testing.T) {
	c := DefaultRouteConfig()
	c.Buckets = 16
	tab, err := routeTable(encodeAll(skewedDigests(), c), []int{2, 0, 1}, c)
	if err != nil {
		t.Fatal(err)
	}
	b := tab.Encode()
	back, err := DecodeRouteTable(b)
	if err != nil || !bytes.Equal(back.Encode(), b) || back.Heavy() != tab.Heavy() || back.Parts() != 3 {
		t.Fatalf("decode: %v", err)
	}
	for _, k := range []string{"big1", "s7", "unknown"} {
		if back.Partition([]byte(k), 3) != tab.Partition([]byte(k), 3) {
			t.Fatalf("key %s routed differently after decoding", k)
		}
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, err := DecodeRouteTable(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := DecodeRouteTable(b[:len(b)-5]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
}

// BuildRoute over a job: every rank gets the same table, and a shuffle
// routed by it delivers every pair to the table's partition.
func TestBuildRoute(t *testing.T) {
	const n = 3
	rts, _ := newJob(t, n, 7)
	ds := skewedDigests()
	tabs := make([]*RouteTable, n)
	each(t, n, func(i int) error {
		var err error
		tabs[i], err = BuildRoute(context.Background(), rts[i], ds[i], nil, DefaultRouteConfig())
		return err
	})
	for i := 1; i < n; i++ {
		if !bytes.Equal(tabs[i].Encode(), tabs[0].Encode()) {
			t.Fatalf("rank %d's table differs from rank 0's", i)
		}
	}
	shs := newShuffles(t, rts, func(c *Config) { c.Partition = tabs[0].Partition })
	got := make([]map[string]int, n)
	each(t, n, func(i int) error {
		ctx := context.Background()
		for k, st := range ds[i].keys {
			for range st.count {
				if err := shs[i].Send(ctx, []byte(k), make([]byte, st.bytes/st.count-uint64(len(k)))); err != nil {
					return err
				}
			}
		}
		if err := shs[i].CloseSend(ctx); err != nil {
			return err
		}
		got[i] = map[string]int{}
		for k := range shs[i].Recv(ctx) {
			if p := tabs[i].Partition(k, n); p != i {
				return fmt.Errorf("key %s received on partition %d, routed to %d", k, i, p)
			}
			got[i][string(k)]++
		}
		return shs[i].Err()
	})
	if c := got[0]["big3"] + got[1]["big3"] + got[2]["big3"]; c != 21 {
		t.Fatalf("big3 received %d times, sent 21", c)
	}
}

func TestRouteConfigValidate(t *testing.T) {
	for _, c := range []RouteConfig{{Buckets: 0}, {Buckets: 4, HeavyKeys: -1}, {Buckets: 4, Slack: -1}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}
