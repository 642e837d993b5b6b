package kvshuffle

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestPairRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 127, 128, 300, 16383, 16384, 70000}
	var run []byte
	var want [][2][]byte
	for _, kl := range sizes {
		for _, vl := range sizes {
			k, v := make([]byte, kl), make([]byte, vl)
			for i := range k {
				k[i] = byte(r.Uint32())
			}
			for i := range v {
				v[i] = byte(r.Uint32())
			}
			enc := AppendPair(nil, k, v)
			if len(enc) != PairSize(kl, vl) {
				t.Fatalf("PairSize(%d, %d) = %d, encoded %d", kl, vl, PairSize(kl, vl), len(enc))
			}
			buf := make([]byte, len(enc))
			if n := putPair(buf, k, v); n != len(enc) || !bytes.Equal(buf, enc) {
				t.Fatalf("putPair differs from AppendPair for %d/%d", kl, vl)
			}
			gk, gv, n, err := DecodePair(enc)
			if err != nil || n != len(enc) || !bytes.Equal(gk, k) || !bytes.Equal(gv, v) {
				t.Fatalf("DecodePair(%d/%d) = %d bytes, %v", kl, vl, n, err)
			}
			run = append(run, enc...)
			want = append(want, [2][]byte{k, v})
		}
	}
	i := 0
	n, err := DecodeRun(run, func(k, v []byte) error {
		if !bytes.Equal(k, want[i][0]) || !bytes.Equal(v, want[i][1]) {
			t.Fatalf("pair %d differs", i)
		}
		i++
		return nil
	})
	if err != nil || n != len(want) {
		t.Fatalf("DecodeRun = %d, %v; want %d pairs", n, err, len(want))
	}
	stop := errors.New("stop")
	if n, err := DecodeRun(run, func(k, v []byte) error { return stop }); n != 0 || err != stop {
		t.Fatalf("DecodeRun with a failing callback = %d, %v", n, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty key varint", []byte{0x80}},
		{"value length missing", []byte{0x01}},
		{"key beyond end", []byte{0x05, 0x00, 'a'}},
		{"value beyond end", []byte{0x00, 0x05, 'a'}},
		{"lengths sum beyond end", []byte{0x02, 0x02, 'a', 'b', 'c'}},
		{"varint overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00}},
		{"non-canonical zero", []byte{0x80, 0x00, 0x00}},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00}},
		{"trailing garbage", append(AppendPair(nil, []byte("k"), []byte("v")), 0x03)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRun(c.in, nil)
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("DecodeRun(%x) = %v, want a *CorruptError", c.in, err)
			}
		})
	}
}

// FuzzDecodeRun: any input is either rejected with ErrCorrupt or is a run
// whose pairs re-encode to exactly the input (the framing is canonical).
// Nothing panics or reads out of bounds.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendPair(nil, []byte("key"), []byte("value")))
	f.Add(AppendPair(AppendPair(nil, nil, nil), []byte{0}, make([]byte, 200)))
	f.Add([]byte{0x80, 0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var re []byte
		n, err := DecodeRun(b, func(k, v []byte) error {
			re = AppendPair(re, k, v)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("%d pairs re-encode to %x, input %x", n, re, b)
		}
		es, err := indexRun(b, nil, 0, "run")
		if err != nil || len(es) != n {
			t.Fatalf("indexRun = %d, %v; DecodeRun found %d", len(es), err, n)
		}
	})
}

func TestFrameHeader(t *testing.T) {
	const slot = 1024
	good := make([]byte, frameHeader)
	putFrameHeader(good, frameHdr{kind: frameData, len: 100, gen: 3, seq: 9})
	h, err := decodeFrameHeader(good, slot, "frame")
	if err != nil || h.kind != frameData || h.len != 100 || h.gen != 3 || h.seq != 9 {
		t.Fatalf("decode = %+v, %v", h, err)
	}
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	bad := map[string][]byte{
		"short":        good[:10],
		"kind 0":       mut(func(b []byte) { b[0] = 0 }),
		"kind 9":       mut(func(b []byte) { b[0] = 9 }),
		"version":      mut(func(b []byte) { b[1] = 7 }),
		"reserved":     mut(func(b []byte) { b[3] = 1 }),
		"too long":     mut(func(b []byte) { b[4], b[5] = 0xff, 0xff }),
		"marker len":   mut(func(b []byte) { b[0] = byte(frameMarker) }),
		"end len":      mut(func(b []byte) { b[0] = byte(frameEnd) }),
		"empty piece":  mut(func(b []byte) { b[0], b[4] = byte(frameLarge), 0 }),
		"length > max": mut(func(b []byte) { b[7] = 0x80 }),
	}
	for name, b := range bad {
		if _, err := decodeFrameHeader(b, slot, "frame"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// The 31-bit counts in notification values extend correctly across the
// 2^31 wrap as long as fewer than 2^31 frames are outstanding.
func TestCountWrap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		base := r.Uint64() >> r.IntN(64)
		ahead := uint64(r.IntN(1 << 20))
		if got := extendCount(base, encodeCount(base+ahead)); got != base+ahead {
			t.Fatalf("extendCount(%d, enc(%d)) = %d", base, base+ahead, got)
		}
		if encodeCount(base)&0x8000_0000 == 0 {
			t.Fatalf("encodeCount(%d) can be zero", base)
		}
	}
}

// FuzzDecodeFrame: a frame header from a ring slot is accepted only with
// known kinds, consistent lengths within the slot and zero reserved bytes,
// and then re-encodes to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	const slot = 4096
	for _, h := range []frameHdr{{kind: frameData, len: 100, gen: 1, seq: 1}, {kind: frameMarker, len: 8}, {kind: frameEnd}, {kind: frameLargeLast, len: slot - frameHeader}} {
		b := make([]byte, frameHeader)
		putFrameHeader(b, h)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeFrameHeader(b, slot, "frame")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if h.len < 0 || h.len > slot-frameHeader {
			t.Fatalf("accepted length %d", h.len)
		}
		re := make([]byte, frameHeader)
		putFrameHeader(re, h)
		if !bytes.Equal(re, b[:frameHeader]) {
			t.Fatalf("header %x re-encodes to %x", b[:frameHeader], re)
		}
	})
}
