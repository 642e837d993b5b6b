package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// A length on the wire never sizes an allocation by itself, and nesting
// is bounded: such messages are refused with ErrProtocol before the
// decoder runs (it would allocate gigabytes, or recurse until the stack
// is exhausted).
func TestReadMsgRefusesShapes(t *testing.T) {
	for name, c := range map[string]struct {
		body []byte
		why  string
	}{
		"huge array": {append([]byte{0x82, 0xa1, 'k', 0x03, 0xa1, 't', 0x81, 0xa7}, append([]byte("members"), 0xdd, 0x30, 0x30, 0x30, 0x30, 0xc0)...), "length"},
		"long array": {append([]byte{0xdd, 0x00, 0x01, 0x11, 0x70}, make([]byte, 70000)...), "at most"}, // 70000 > MaxProcs
		"huge map":   {[]byte{0xdf, 0x7f, 0xff, 0xff, 0xff, 0xc0, 0xc0}, "length"},
		"deep":       {append(bytes.Repeat([]byte{0x91}, 10000), 0xc0), "nested deeper"},
		"huge str":   {[]byte{0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'}, "length"},
		"ext":        {[]byte{0xc7, 0x05, 0x01, 'a'}, "bytes left"},
		"bad code":   {[]byte{0xc1}, "unknown msgpack code"},
		"trailing":   {[]byte{0x80, 0xc0}, "trailing"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readMsg(bytes.NewReader(frame(c.body)), MaxServerMessage)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("readMsg = %v; want ErrProtocol saying %q", err, c.why)
			}
		})
	}
	// Every kind of value the codec writes passes the walk.
	b, err := encodeMsg(&envelope{Kind: msgTable, Table: &Table{NumRanks: 1, JobID: "j",
		Members: []Member{{Proc: 0, Addr: "a:1", Host: "h", Pid: -7, Extra: map[string]string{"raft": "a:2"}}}}}, MaxServerMessage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readMsg(bytes.NewReader(b), MaxServerMessage); err != nil {
		t.Fatalf("a table as encoded is refused: %v", err)
	}
}
