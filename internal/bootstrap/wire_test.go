package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestMessageRoundTrip(t *testing.T) {
	tbl := &Table{NumRanks: 1, JobID: "j", Members: []Member{
		{Proc: 0, Addr: "127.0.0.1:1", Host: "a", Pid: 10, Extra: map[string]string{"raft": "127.0.0.1:2"}},
		{Proc: 1, Addr: "127.0.0.1:3", Host: "b", Pid: 11},
	}}
	for _, e := range []*envelope{
		{Kind: msgHello, Hello: &hello{Version: 1, NumProcs: 2, NumRanks: 1, JobID: "j", Member: tbl.Members[0]}},
		{Kind: msgAck},
		{Kind: msgTable, Table: tbl},
		{Kind: msgReject, Reason: "no"},
		{Kind: msgReport, Report: &Report{Proc: 1, Kind: KindRole, Rank: 0, Epoch: 7, Text: "x"}},
		{Kind: msgHello, Hello: &hello{Version: 1, JobID: "j", Member: Member{Proc: JoinerID, Addr: "127.0.0.1:9", Host: "c"}, Join: true}},
		{Kind: msgAck, Proc: 2},
		{Kind: msgJoined, Table: &Table{NumRanks: 1, JobID: "j", Members: tbl.Members, RefillWait: 1500 * time.Millisecond}, Proc: 2},
		{Kind: msgFinished},
		{Kind: msgHello, Hello: &hello{Version: 1, NumProcs: 2, NumRanks: 1, JobID: "j", Member: tbl.Members[1], Relay: "127.0.0.1:4"}},
		{Kind: msgRelay, Relay: &relayNotice{From: []relaySource{{Proc: 0, Addr: "127.0.0.1:5"}}, Size: 300, Sum: make([]byte, 32)}},
		{Kind: msgTableAsk},
	} {
		var buf bytes.Buffer
		if err := writeMsg(&buf, e, MaxServerMessage); err != nil {
			t.Fatal(err)
		}
		got, err := readMsg(&buf, MaxServerMessage)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
	if err := tbl.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestMessageLimits(t *testing.T) {
	// A length beyond the cap is refused before the body is read.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<31)
	if _, err := readMsg(bytes.NewReader(hdr[:]), MaxClientMessage); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge length: %v, want ErrTooLarge", err)
	}
	if _, err := readMsg(bytes.NewReader([]byte{0, 0, 0, 0}), MaxClientMessage); !errors.Is(err, ErrProtocol) {
		t.Fatalf("empty message: %v, want ErrProtocol", err)
	}
	big := &envelope{Kind: msgReject, Reason: string(make([]byte, MaxClientMessage))}
	if err := writeMsg(&bytes.Buffer{}, big, MaxClientMessage); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized write: %v, want ErrTooLarge", err)
	}
	// Unknown kind, missing body, trailing bytes.
	for _, e := range []*envelope{{Kind: 99}, {Kind: msgHello}, {Kind: msgTable}, {Kind: msgReport}, {Kind: msgJoined, Proc: 2},
		{Kind: msgRelay}, {Kind: msgRelay, Relay: &relayNotice{Size: 300, Sum: make([]byte, 32)}},
		{Kind: msgRelay, Relay: &relayNotice{From: []relaySource{{}, {}, {}, {}}, Size: 300, Sum: make([]byte, 32)}},
		{Kind: msgRelay, Relay: &relayNotice{From: []relaySource{{}}, Size: 0, Sum: make([]byte, 32)}},
		{Kind: msgRelay, Relay: &relayNotice{From: []relaySource{{}}, Size: 300, Sum: make([]byte, 3)}}} {
		b, err := encodeMsg(e, MaxClientMessage)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readMsg(bytes.NewReader(b), MaxClientMessage); !errors.Is(err, ErrProtocol) {
			t.Errorf("kind %d: %v, want ErrProtocol", e.Kind, err)
		}
	}
	b, _ := encodeMsg(&envelope{Kind: msgAck}, MaxClientMessage)
	b = append(b, 0xc0)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := readMsg(bytes.NewReader(b), MaxClientMessage); !errors.Is(err, ErrProtocol) {
		t.Errorf("trailing bytes: %v, want ErrProtocol", err)
	}
}

func TestTableValidate(t *testing.T) {
	m := func(p uint32) Member { return Member{Proc: p, Addr: "h:1", Host: "h"} }
	for name, tb := range map[string]Table{
		"empty":          {NumRanks: 1},
		"no ranks":       {NumRanks: 0, Members: []Member{m(0)}},
		"too many ranks": {NumRanks: 2, Members: []Member{m(0)}},
		"out of order":   {NumRanks: 1, Members: []Member{m(1), m(0)}},
		"bad addr":       {NumRanks: 1, Members: []Member{{Proc: 0, Addr: "x", Host: "h"}}},
		"bad extra":      {NumRanks: 1, Members: []Member{{Proc: 0, Addr: "h:1", Host: "h", Extra: map[string]string{"raft": ""}}}},
	} {
		if err := tb.Validate(); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

// FuzzReadMsg checks that no input makes the decoder panic or accept a
// message that violates the envelope's invariants.
func FuzzReadMsg(f *testing.F) {
	for _, e := range []*envelope{
		{Kind: msgHello, Hello: &hello{Version: 1, Member: Member{Proc: 1, Addr: "a:1", Host: "h", Extra: map[string]string{"k": "v"}}}},
		{Kind: msgTable, Table: &Table{NumRanks: 1, Members: []Member{{Addr: "a:1", Host: "h"}}}},
		{Kind: msgReport, Report: &Report{Kind: KindEvent, Text: "t"}},
		{Kind: msgReject, Reason: "r"},
	} {
		b, _ := encodeMsg(e, MaxServerMessage)
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 1, 0xc1})
	f.Add([]byte{0, 0, 0, 5, 0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := readMsg(bytes.NewReader(b), MaxClientMessage)
		if err != nil {
			return
		}
		switch e.Kind {
		case msgHello:
			if e.Hello == nil {
				t.Fatal("hello without body accepted")
			}
		case msgTable:
			if e.Table == nil {
				t.Fatal("table without body accepted")
			}
			_ = e.Table.Validate()
		case msgReport:
			if e.Report == nil {
				t.Fatal("report without body accepted")
			}
		case msgAck, msgReject:
		default:
			t.Fatalf("unknown kind %d accepted", e.Kind)
		}
	})
}
