package tcp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"runtime/metrics"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// refFrame is one frame found by the reference parser.
type refFrame struct {
	h         transport.Header
	payload   []byte // what the stream holds for it (short if truncated)
	truncated bool
}

// refParse is the naive reference for frameReader: it walks the stream and
// says which frames a handler must see and how the stream must end.
func refParse(data []byte) (frames []refFrame, end error) {
	off := 0
	for {
		rest := data[off:]
		switch {
		case len(rest) == 0:
			return frames, io.EOF
		case len(rest) < transport.HeaderSize:
			return frames, io.ErrUnexpectedEOF
		}
		h, err := transport.DecodeHeader(rest)
		if err != nil {
			return frames, transport.ErrBadFrame
		}
		off += transport.HeaderSize
		body := data[off:]
		if len(body) < int(h.Len) {
			return append(frames, refFrame{h, body, true}), io.ErrUnexpectedEOF
		}
		frames = append(frames, refFrame{h, body[:h.Len], false})
		off += int(h.Len)
	}
}

func frameBytes(h transport.Header, payload []byte) []byte {
	h.Len = uint32(len(payload))
	b := make([]byte, transport.HeaderSize, transport.HeaderSize+len(payload))
	h.Encode(b)
	return append(b, payload...)
}

var heapAllocs = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}

func allocatedBytes() uint64 {
	metrics.Read(heapAllocs)
	return heapAllocs[0].Value.Uint64()
}

// FuzzReader feeds arbitrary bytes to the frame-reading loop of a
// connection (after the handshake) with a handler that reads, discards,
// ignores or rejects payloads, and checks it against refParse: the same
// frames in the same order with the same payloads, Src forced to the
// authenticated peer, the right end of stream, no panic, and no allocation
// sized from a length on the wire.
func FuzzReader(f *testing.F) {
	var stream []byte
	for i, size := range []int{0, 1, 100, 5000, 300} {
		h := transport.Header{Type: transport.FrameType(1 + i%11), Seq: uint64(i), Src: 99}
		stream = append(stream, frameBytes(h, bytes.Repeat([]byte{byte(i)}, size))...)
	}
	f.Add(stream, uint8(0x00))
	f.Add(stream, uint8(0x1B))
	f.Add(stream, uint8(0xE4))
	f.Add(stream[:len(stream)-10], uint8(0)) // truncated payload
	f.Add(stream[:transport.HeaderSize+130], uint8(0x55))
	bad := frameBytes(transport.Header{Type: transport.FrameAck}, []byte("ok"))
	bad = append(bad, frameBytes(transport.Header{Type: 77}, nil)...)
	f.Add(bad, uint8(0))
	huge := frameBytes(transport.Header{Type: transport.FrameWrite}, nil)
	huge[0], huge[1], huge[2], huge[3] = 0xFF, 0xFF, 0xFF, 0xFF
	f.Add(huge, uint8(0))
	capLen := frameBytes(transport.Header{Type: transport.FrameWrite}, nil)
	capLen[3] = 0x04 // Len = MaxPayload exactly, with no payload behind it
	f.Add(capLen, uint8(0))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("GASPIGO1garbage"), uint8(0))

	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		want, wantEnd := refParse(data)
		const from = transport.Proc(3)
		scratch := make([]byte, 4096) // smaller than some seed payloads: both paths run
		type got struct {
			h  transport.Header
			ok bool // payload checked
		}
		seen := make([]got, 0, len(want)+1)
		rejected := errors.New("rejected")
		var bad string
		h := newHandler(func(fr transport.Proc, hd *transport.Header, p transport.Payload) error {
			i := len(seen)
			if i >= len(want) {
				bad = "more frames than the reference"
				return p.Discard()
			}
			if fr != from || hd.Src != from {
				bad = "Src not forced to the authenticated peer"
			}
			if p.Len() != int(hd.Len) {
				bad = "Payload.Len differs from the header"
			}
			seen = append(seen, got{h: *hd})
			switch (mode >> (uint(i) % 4 * 2)) & 3 {
			case 0, 3:
				if p.Len() > len(scratch) {
					return p.Discard()
				}
				dst := scratch[:p.Len()]
				err := p.ReadInto(dst)
				if want[i].truncated {
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						bad = "ReadInto of a truncated payload did not fail with ErrUnexpectedEOF"
					}
					return err
				}
				if err != nil || !bytes.Equal(dst, want[i].payload) {
					bad = "payload differs from the stream"
				}
				seen[i].ok = true
				if mode&0x80 != 0 {
					return rejected
				}
			case 1:
				return p.Discard()
			}
			return nil // case 2: left for the reader to skip
		})
		br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
		fr := newFrameReader(br, from, &counters{}, nil, nil)
		before := allocatedBytes()
		err := fr.run(h, nil)
		allocated := allocatedBytes() - before

		if bad != "" {
			t.Fatal(bad)
		}
		if len(seen) != len(want) {
			t.Fatalf("handler saw %d frames, reference %d", len(seen), len(want))
		}
		for i, g := range seen {
			w := want[i].h
			w.Src = from
			if g.h != w {
				t.Fatalf("frame %d: header %+v, want %+v", i, g.h, w)
			}
		}
		if !errors.Is(err, wantEnd) {
			t.Fatalf("reader ended with %v, want %v", err, wantEnd)
		}
		// One Header per frame plus small change. The counter is process
		// wide, so the fuzzing engine's own allocations land in it too;
		// the slack covers them, and a buffer sized from a wire length
		// (up to MaxPayload, 64 MiB) still shows.
		if budget := uint64(1<<20 + 4*len(data)); allocated > budget {
			t.Fatalf("reader allocated %d bytes for a %d-byte stream (budget %d)", allocated, len(data), budget)
		}
	})
}
