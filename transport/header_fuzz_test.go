package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzDecodeHeader checks that DecodeHeader never panics, that it rejects
// what it must (short input, unknown types, Len above MaxPayload) with
// ErrBadFrame, and that every header it accepts re-encodes to the same 48
// bytes.
func FuzzDecodeHeader(f *testing.F) {
	for typ := FrameInvalid + 1; typ < frameTypeCount; typ++ {
		var b [HeaderSize]byte
		h := Header{Len: uint32(typ) * 100, Type: typ, Flags: FlagAck, Seg: 2, Epoch: 3, Src: 4, Seq: 5, Off: 6, A: 7, B: 8}
		h.Encode(b[:])
		f.Add(b[:])
	}
	var max [HeaderSize]byte
	(&Header{Len: MaxPayload, Type: FrameWrite}).Encode(max[:])
	f.Add(max[:])
	var over [HeaderSize]byte
	(&Header{Len: MaxPayload + 1, Type: FrameWrite}).Encode(over[:])
	f.Add(over[:])
	var bad [HeaderSize]byte
	(&Header{Type: frameTypeCount}).Encode(bad[:])
	f.Add(bad[:])
	f.Add(max[:HeaderSize-1]) // short
	f.Add([]byte{})
	f.Add(append(max[:], 0xEE, 0xFF)) // trailing bytes are not the header's

	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			valid := len(b) >= HeaderSize && FrameType(b[4]).Valid() && binary.LittleEndian.Uint32(b) <= MaxPayload
			if valid {
				t.Fatalf("rejected a valid header % x: %v", b[:HeaderSize], err)
			}
			return
		}
		if len(b) < HeaderSize {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if h.Len > MaxPayload {
			t.Fatalf("accepted Len %d above MaxPayload", h.Len)
		}
		if !h.Type.Valid() {
			t.Fatalf("accepted type %d", h.Type)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if !bytes.Equal(out[:], b[:HeaderSize]) {
			t.Fatalf("re-encoding differs:\n in % x\nout % x", b[:HeaderSize], out)
		}
	})
}
