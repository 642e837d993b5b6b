package spares

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// readCtlFrame is what both ends of the control RPC do with the bytes of
// a connection: read one length-prefixed frame. It returns the frame and
// how many bytes it consumed.
func readCtlFrame(t *testing.T, b []byte) ([]byte, int, error) {
	r := bytes.NewReader(b)
	body, err := readFrame(r)
	if err != nil {
		if !errors.Is(err, errProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("readFrame: %v, want ErrProtocol or a short read", err)
		}
		return nil, 0, err
	}
	used := len(b) - r.Len()
	if len(body) > maxCtlFrame || used != 4+len(body) {
		t.Fatalf("readFrame returned %d bytes after consuming %d", len(body), used)
	}
	var w bytes.Buffer
	if err := writeFrame(&w, body); err != nil || !bytes.Equal(w.Bytes(), b[:used]) {
		t.Fatalf("frame of %d bytes does not re-frame to the input: %v", len(body), err)
	}
	return body, used, nil
}

// rawArray encodes v as one msgpack array with the library's own encoder,
// to build messages the package's encoders would not write.
func rawArray(tb testing.TB, v ...any) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := e.EncodeArrayLen(len(v)); err != nil {
		tb.Fatal(err)
	}
	for _, x := range v {
		if err := e.Encode(x); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func ctlFrame(t testing.TB, body []byte) []byte {
	var w bytes.Buffer
	if err := writeFrame(&w, body); err != nil {
		t.Fatal(err)
	}
	return w.Bytes()
}

// FuzzCtlRequest: what the control-RPC server reads from a connection that
// passed the job-token handshake. Framing errors are errProtocol or a short
// read, decoding errors wrap errProtocol, the command handed on is within
// maxCommandSize, and an accepted request re-encodes to a request that
// decodes to the same command.
func FuzzCtlRequest(f *testing.F) {
	for _, cmd := range sampleCommands() {
		b, _ := encodeCommand(cmd)
		req, err := encodeCtlRequest(ctlOpPropose, b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(ctlFrame(f, req))
	}
	f.Add(ctlFrame(f, rawArray(f, 1, 2, []byte{})))     // standing
	f.Add(ctlFrame(f, rawArray(f, 1, 2, []byte{1, 2}))) // standing with a payload
	f.Add(ctlFrame(f, rawArray(f, 2, 1, []byte{})))     // wrong version
	f.Add(ctlFrame(f, rawArray(f, 1, 7, []byte{1, 2}))) // unknown op
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})               // oversized frame
	f.Add([]byte{0, 0, 0, 9, 0x93, 1, 1})               // cut short
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, _, err := readCtlFrame(t, b)
		if err != nil {
			return
		}
		op, cmd, err := decodeCtlRequest(body)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("decodeCtlRequest: %v does not wrap ErrProtocol", err)
			}
			return
		}
		if len(cmd) > maxCommandSize || (op == ctlOpStanding && len(cmd) != 0) {
			t.Fatalf("accepted op %d with a %d-byte payload", op, len(cmd))
		}
		again, err := encodeCtlRequest(op, cmd)
		if err != nil {
			t.Fatalf("accepted request does not re-encode: %v", err)
		}
		op2, back, err := decodeCtlRequest(again)
		if err != nil || op2 != op || !bytes.Equal(back, cmd) {
			t.Fatalf("re-encoded request decodes to op %d %x, %v; want op %d %x", op2, back, err, op, cmd)
		}
	})
}

// FuzzCtlResponse: what a caller reads back from the control RPC. Errors
// wrap errProtocol (or are a short read); an accepted response has every
// field within its cap (code 64 bytes, messages 1 KiB, rank -1..maxProcs,
// a known status) and survives encode and decode unchanged.
func FuzzCtlResponse(f *testing.F) {
	for _, r := range []ctlResponse{
		{Code: codeOK, Leader: noProc, Result: result{Rank: -1, Promoted: noProc}},
		{Code: "not-leader", Msg: "ask proc 2", Leader: 2, Result: result{Rank: -1}},
		{Code: codeOK, Leader: 1, Result: result{Changed: true, Epoch: 7, Rank: 3, Promoted: 9, Status: statusFailed, Note: "promoted"}},
	} {
		b, err := encodeCtlResponse(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(ctlFrame(f, b))
	}
	f.Add(ctlFrame(f, rawArray(f, "ok")))
	f.Add([]byte{0, 0, 0, 3, 0x99, 0xa2, 'o'})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, _, err := readCtlFrame(t, b)
		if err != nil {
			return
		}
		r, err := decodeCtlResponse(body)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("decodeCtlResponse: %v does not wrap ErrProtocol", err)
			}
			return
		}
		if len(r.Code) > 64 || len(r.Msg) > 1024 || len(r.Result.Note) > 1024 ||
			r.Result.Rank < -1 || r.Result.Rank > maxProcs || r.Result.Status > statusFailed {
			t.Fatalf("accepted %+v", r)
		}
		again, err := encodeCtlResponse(r)
		if err != nil {
			t.Fatalf("accepted response does not re-encode: %v", err)
		}
		back, err := decodeCtlResponse(again)
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("response %+v came back as %+v, %v", r, back, err)
		}
	})
}
