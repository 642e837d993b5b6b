package spares

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func sampleCommands() []command {
	return []command{
		declareFailed{Proc: 3, Reporter: noProc, Epoch: 7},
		declareFailed{Proc: 0, Reporter: 1, Epoch: 0},
		addSpare{Proc: 9, Info: procInfo{Addr: "10.0.0.9:7000", Host: "n9", RaftAddr: "10.0.0.9:7001", CtlAddr: "10.0.0.9:7002"}},
		finish{},
		setVoters{Voters: []uint32{1, 2, 3, 4, 5}},
		endWait{Rank: 2, Since: 5},
		endWait{Rank: 0, Since: 0},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for _, cmd := range sampleCommands() {
		b, err := encodeCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeCommand(b)
		if err != nil || !reflect.DeepEqual(got, cmd) {
			t.Errorf("round trip of %#v = %#v, %v", cmd, got, err)
		}
	}
}

func encodeRaw(t *testing.T, v ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := e.EncodeArrayLen(len(v)); err != nil {
		t.Fatal(err)
	}
	for _, x := range v {
		if err := e.Encode(x); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestDecodeCommandRejects(t *testing.T) {
	good, _ := encodeCommand(declareFailed{Proc: 1, Reporter: 2, Epoch: 3})
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "unexpected end of input"},
		{"not an array", []byte{0x01}, "want an array"},
		{"trailing", append(append([]byte{}, good...), 0), "1 trailing bytes"},
		{"truncated", good[:len(good)-1], ""},
		{"unknown kind", encodeRaw(t, 99), "unknown command kind 99"},
		{"field count", encodeRaw(t, 1, 2, 3), "DeclareFailed has 3 fields, want 4"},
		{"negative proc", encodeRaw(t, 1, -1, 2, 3), "want an unsigned integer"},
		{"proc too big", encodeRaw(t, 1, uint64(1)<<33, 2, 3), "above the limit"},
		{"string as int", encodeRaw(t, 1, "7", 2, 3), "want an unsigned integer"},
		{"retired kind", encodeRaw(t, 3, 7), "unknown command kind 3"},
		{"long addr", encodeRaw(t, 2, 1, strings.Repeat("a", 300), "", "", ""), "string of 300 bytes"},
		{"int as string", encodeRaw(t, 2, 1, 5, "", "", ""), "want a string"},
		{"too many voters", encodeRaw(t, 5, make([]uint32, 10)), "array of 10 elements"},
		{"huge array claim", []byte{0x92, 0x05, 0xdd, 0xff, 0xff, 0xff, 0xff}, "array of 4294967295 elements"},
		{"huge string claim", append(encodeRaw(t, 2, 1)[:0], 0x96, 0x02, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff), "string of 4294967295 bytes"},
		{"oversized", make([]byte, maxCommandSize+1), "max 4096"},
		{"EndWait field count", encodeRaw(t, 6, 1), "EndWait has 2 fields, want 3"},
		{"EndWait rank too big", encodeRaw(t, 6, maxProcs, 1), "above the limit"},
		{"EndWait negative since", encodeRaw(t, 6, 1, -1), "want an unsigned integer"},
	}
	for _, tc := range tests {
		_, err := decodeCommand(tc.b)
		if !errors.Is(err, errBadCommand) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decodeCommand = %v, want ErrBadCommand mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestStateRoundTripAndRejects(t *testing.T) {
	st := mustState(t, 4, 2, 3, true)
	if _, err := st.apply(declareFailed{Proc: 2, Reporter: noProc}); err != nil {
		t.Fatal(err)
	}
	b1, err := encodeState(&st)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := encodeState(&st)
	if !bytes.Equal(b1, b2) {
		t.Fatal("encodeState is not deterministic")
	}
	got, err := decodeState(b1)
	if err != nil || !reflect.DeepEqual(normState(got), normState(st)) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, st)
	}
	// Every truncation is an error, never a panic.
	for i := 0; i < len(b1); i++ {
		if _, err := decodeState(b1[:i]); !errors.Is(err, errBadSnapshot) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	// A state that decodes but breaks an invariant is refused.
	bad := st.Clone()
	bad.Spares = append(bad.Spares, bad.Ranks.at(0))
	b, _ := encodeState(&bad)
	if _, err := decodeState(b); !errors.Is(err, errBadSnapshot) || !strings.Contains(err.Error(), "is also rank 0") {
		t.Fatalf("inconsistent state: %v", err)
	}
	if _, err := decodeState(encodeRaw(t, 2)); !errors.Is(err, errBadSnapshot) {
		t.Fatalf("wrong field count: %v", err)
	}
}

func TestCtlFrames(t *testing.T) {
	cmd, _ := encodeCommand(finish{})
	req, err := encodeCtlRequest(ctlOpPropose, cmd)
	if err != nil {
		t.Fatal(err)
	}
	op, back, err := decodeCtlRequest(req)
	if err != nil || op != ctlOpPropose || !bytes.Equal(back, cmd) {
		t.Fatalf("request round trip: op %d %x, %v", op, back, err)
	}
	resp := ctlResponse{Code: "not-leader", Msg: "m", Leader: 4, Result: result{Changed: true, Epoch: 5, Rank: 2, Promoted: 9, Status: statusFailed, Note: "n"}}
	b, _ := encodeCtlResponse(resp)
	got, err := decodeCtlResponse(b)
	if err != nil || !reflect.DeepEqual(got, resp) {
		t.Fatalf("response round trip: %+v, %v", got, err)
	}
	resp.Result.Rank = -1
	b, _ = encodeCtlResponse(resp)
	if got, _ := decodeCtlResponse(b); got.Result.Rank != -1 {
		t.Fatalf("rank -1 came back as %d", got.Result.Rank)
	}
	var buf bytes.Buffer
	buf.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if _, err := readFrame(&buf); !errors.Is(err, errProtocol) {
		t.Fatalf("oversized frame: %v", err)
	}
	if _, _, err := decodeCtlRequest(encodeRaw(t, 2, 1, []byte{})); !errors.Is(err, errProtocol) {
		t.Fatalf("wrong version: %v", err)
	}
}

// FuzzDecodeCommand: decoding arbitrary bytes never panics; what decodes
// re-encodes to the same bytes, and applying it keeps the invariants.
func FuzzDecodeCommand(f *testing.F) {
	for _, cmd := range sampleCommands() {
		b, _ := encodeCommand(cmd)
		f.Add(b)
	}
	f.Add([]byte{0x92, 0x05, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := decodeCommand(b)
		if err != nil {
			if !errors.Is(err, errBadCommand) {
				t.Fatalf("error does not wrap ErrBadCommand: %v", err)
			}
			return
		}
		again, err := encodeCommand(cmd)
		if err != nil {
			t.Fatalf("decoded %#v does not re-encode: %v", cmd, err)
		}
		if back, err := decodeCommand(again); err != nil || !reflect.DeepEqual(normalize(back), normalize(cmd)) {
			t.Fatalf("re-encoded %#v decodes to %#v, %v", cmd, back, err)
		}
		st := mustStateT(6, 4)
		if _, err := st.apply(cmd); err == nil {
			if err := st.Validate(); err != nil {
				t.Fatalf("%#v broke the state: %v", cmd, err)
			}
		}
	})
}

// FuzzDecodeState: snapshots from a peer or a disk never panic the decoder,
// and what decodes is a valid state.
func FuzzDecodeState(f *testing.F) {
	st := mustStateT(6, 4)
	b, _ := encodeState(&st)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, errBadSnapshot) {
				t.Fatalf("error does not wrap ErrBadSnapshot: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
