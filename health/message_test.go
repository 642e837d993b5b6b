package health

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Kind: KindPing, Seq: 1, Target: 0},
		{Kind: KindAck, Seq: 1<<64 - 1, Target: 7},
		{Kind: KindPingReq, Seq: 42, Target: 1<<32 - 2},
		{Kind: KindIndirectAck, Seq: 0, Target: 3},
		{Kind: KindIndirectNack, Seq: 9, Target: 3},
	} {
		var b [MessageSize]byte
		n, err := m.Encode(b[:])
		if err != nil || n != MessageSize {
			t.Fatalf("Encode(%v) = %d, %v", m, n, err)
		}
		got, err := DecodeMessage(b[:])
		if err != nil || got != m {
			t.Fatalf("DecodeMessage(Encode(%v)) = %v, %v", m, got, err)
		}
		app, err := AppendMessage([]byte{0xAA}, m)
		if err != nil || !bytes.Equal(app[1:], b[:]) || app[0] != 0xAA {
			t.Fatalf("AppendMessage(%v) = %x, %v", m, app, err)
		}
	}
}

func TestMessageWireLayout(t *testing.T) {
	m := Message{Kind: KindPingReq, Seq: 0x0102030405060708, Target: 0x0a0b0c0d}
	var b [MessageSize]byte
	if _, err := m.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 3, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a, 8, 7, 6, 5, 4, 3, 2, 1}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("encoding %x, want %x", b, want)
	}
}

func TestDecodeMessageRejects(t *testing.T) {
	good := func() []byte {
		b := make([]byte, MessageSize)
		if _, err := (Message{Kind: KindPing, Seq: 5, Target: 2}).Encode(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"nil", nil, "0 bytes"},
		{"short", good()[:MessageSize-1], "15 bytes"},
		{"long", append(good(), 0), "17 bytes"},
		{"version 0", func() []byte { b := good(); b[0] = 0; return b }(), "version 0"},
		{"version 2", func() []byte { b := good(); b[0] = 2; return b }(), "version 2"},
		{"reserved", func() []byte { b := good(); b[3] = 1; return b }(), "reserved"},
		{"kind 0", func() []byte { b := good(); b[1] = 0; return b }(), "unknown kind 0"},
		{"kind 6", func() []byte { b := good(); b[1] = 6; return b }(), "unknown kind 6"},
		{"kind 255", func() []byte { b := good(); b[1] = 255; return b }(), "unknown kind 255"},
		{"no target", func() []byte { b := good(); copy(b[4:8], []byte{0xff, 0xff, 0xff, 0xff}); return b }(), "without a target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage(tt.b)
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("DecodeMessage = %v, %v; want ErrBadMessage", m, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			if m != (Message{}) {
				t.Fatalf("rejected message returned non-zero %v", m)
			}
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	var b [MessageSize]byte
	if _, err := (Message{Kind: 0, Target: 1}).Encode(b[:]); !errors.Is(err, ErrBadMessage) {
		t.Errorf("invalid kind: %v", err)
	}
	if _, err := (Message{Kind: KindAck, Target: transport.NoProc}).Encode(b[:]); !errors.Is(err, ErrBadMessage) {
		t.Errorf("no target: %v", err)
	}
	if _, err := (Message{Kind: KindAck, Target: 1}).Encode(b[:MessageSize-1]); !errors.Is(err, ErrBadMessage) {
		t.Errorf("short buffer: %v", err)
	}
	if out, err := AppendMessage([]byte{1}, Message{}); !errors.Is(err, ErrBadMessage) || len(out) != 1 {
		t.Errorf("AppendMessage(invalid) = %x, %v", out, err)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for k := KindPing; k < kindCount; k++ {
		b, _ := AppendMessage(nil, Message{Kind: k, Seq: uint64(k) * 1000, Target: transport.Proc(k)})
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, MessageSize))
	f.Add(bytes.Repeat([]byte{0xff}, MessageSize+3))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		// Anything accepted is canonical: it encodes back to the same bytes.
		var out [MessageSize]byte
		if _, err := m.Encode(out[:]); err != nil {
			t.Fatalf("accepted %x but cannot encode %v: %v", b, m, err)
		}
		if !bytes.Equal(out[:], b) {
			t.Fatalf("accepted %x, re-encoded as %x", b, out)
		}
	})
}
