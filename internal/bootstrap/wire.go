package bootstrap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// ServerID is the id the rendezvous server presents in the job-token
// handshake (auth.PurposeRendezvous); processes present their Proc.
const ServerID uint32 = 0xFFFFFFFF

// Size caps of one rendezvous message (the 4-byte length prefix excluded).
// A decoder rejects a larger length before allocating.
const (
	// MaxClientMessage caps what a process sends: its Member (Extra
	// included) or a Report.
	MaxClientMessage = 64 << 10
	// MaxServerMessage caps what the rendezvous sends: the member table of
	// up to MaxProcs processes.
	MaxServerMessage = 16 << 20
	// MaxReportText caps Report.Text; Session.Report truncates longer text.
	MaxReportText = 4 << 10
)

// protoVersion is sent in every hello; the server rejects other versions.
const protoVersion = 1

// Report kinds. The rendezvous delivers only these.
const (
	// KindRole: the process now holds Rank (>= 0) or no rank (-1) as of
	// Epoch. A promoted spare must send it, so the launcher can label its
	// output and know the rank is held again.
	KindRole = "role"
	// KindFinished: the process finished its work (Rank is the rank it held).
	KindFinished = "finished"
	// KindError: the process hit an error it is about to exit with (Text).
	KindError = "error"
	// KindVacant: Rank was left vacant as of Epoch: lost with no spare
	// left in a job that shrinks. The job goes on without it, so the
	// launcher counts it as done, not lost. Every survivor may send it.
	KindVacant = "vacant"
	// KindEvent: anything worth showing the user (Text), e.g. "restored
	// checkpoint 14".
	KindEvent = "event"
	// KindDisconnected is made by the Server itself, never sent by a
	// process: the process's registered connection closed (before the table
	// was complete, the process must register again). It follows every
	// report that came over that connection.
	KindDisconnected = "disconnected"
)

// Member is one process as the table lists it.
type Member struct {
	Proc  uint32            `msgpack:"proc"`
	Addr  string            `msgpack:"addr"`  // data-plane listener, host:port
	Host  string            `msgpack:"host"`  // host label (Env.Host)
	Pid   int               `msgpack:"pid"`   // OS process id, for diagnostics
	Extra map[string]string `msgpack:"extra"` // more endpoints, e.g. "raft" => host:port
}

// Table is the job's member table, the same in every process.
type Table struct {
	NumRanks int      `msgpack:"nranks"`
	Members  []Member `msgpack:"members"` // indexed by Proc
	JobID    string   `msgpack:"job"`
}

// NumProcs is the number of processes in the table.
func (t Table) NumProcs() int { return len(t.Members) }

// Report is a status message from a process to the launcher. The
// rendezvous fills in Proc from the authenticated connection.
type Report struct {
	Proc  uint32 `msgpack:"proc"`
	Kind  string `msgpack:"kind"` // KindRole, KindFinished, KindError, KindEvent
	Rank  int    `msgpack:"rank"` // -1: no rank
	Epoch uint64 `msgpack:"epoch"`
	Text  string `msgpack:"text"`
}

func validKind(k string) bool {
	switch k {
	case KindRole, KindFinished, KindError, KindEvent, KindVacant:
		return true
	}
	return false
}

// Message kinds on the wire.
const (
	msgHello  uint8 = 1 // process -> server: hello
	msgAck    uint8 = 2 // server -> process: registered, wait for the table
	msgTable  uint8 = 3 // server -> process: the table
	msgReject uint8 = 4 // server -> process: Reason, then close
	msgReport uint8 = 5 // process -> server: Report
)

type hello struct {
	Version  int    `msgpack:"v"`
	NumProcs int    `msgpack:"nprocs"`
	NumRanks int    `msgpack:"nranks"`
	JobID    string `msgpack:"job"`
	Member   Member `msgpack:"member"`
}

type envelope struct {
	Kind   uint8   `msgpack:"k"`
	Hello  *hello  `msgpack:"h,omitempty"`
	Table  *Table  `msgpack:"t,omitempty"`
	Reason string  `msgpack:"r,omitempty"`
	Report *Report `msgpack:"p,omitempty"`
}

// encodeMsg returns the framed message: a 4-byte big-endian length, then
// the msgpack body.
func encodeMsg(e *envelope, max int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write([]byte{0, 0, 0, 0})
	if err := msgpack.NewEncoder(&buf).Encode(e); err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrProtocol, err)
	}
	b := buf.Bytes()
	n := len(b) - 4
	if n > max {
		return nil, fmt.Errorf("%w: %d bytes, cap %d", ErrTooLarge, n, max)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	return b, nil
}

func writeMsg(w io.Writer, e *envelope, max int) error {
	b, err := encodeMsg(e, max)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readMsg reads one framed message of at most max bytes. I/O errors are
// returned as they are (io.EOF for a clean close between messages); bad
// input wraps ErrTooLarge or ErrProtocol.
func readMsg(r io.Reader, max int) (*envelope, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrProtocol)
	}
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: length %d, cap %d", ErrTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return decodeBody(body)
}

func decodeBody(body []byte) (*envelope, error) {
	var e envelope
	rd := bytes.NewReader(body)
	if err := msgpack.NewDecoder(rd).Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: decode: %v", ErrProtocol, err)
	}
	if rd.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrProtocol, rd.Len())
	}
	switch e.Kind {
	case msgHello:
		if e.Hello == nil {
			return nil, fmt.Errorf("%w: hello without body", ErrProtocol)
		}
	case msgTable:
		if e.Table == nil {
			return nil, fmt.Errorf("%w: table message without table", ErrProtocol)
		}
	case msgReport:
		if e.Report == nil {
			return nil, fmt.Errorf("%w: report message without report", ErrProtocol)
		}
	case msgAck, msgReject:
	default:
		return nil, fmt.Errorf("%w: unknown message kind %d", ErrProtocol, e.Kind)
	}
	return &e, nil
}

// checkMember validates a member as it comes from a process.
func checkMember(m Member) error {
	if err := checkAddr(m.Addr); err != nil {
		return fmt.Errorf("data-plane address %q: %v", m.Addr, err)
	}
	if err := checkHost(m.Host); err != nil {
		return fmt.Errorf("host %q: %v", m.Host, err)
	}
	for k, v := range m.Extra {
		if k == "" {
			return fmt.Errorf("extra endpoint with an empty name")
		}
		if v == "" {
			return fmt.Errorf("extra endpoint %q is empty", k)
		}
	}
	return nil
}

// Validate checks a table as a process receives it: one member per process
// in Proc order, a rank count that fits, and well-formed members.
func (t Table) Validate() error {
	n := len(t.Members)
	if n < 1 || n > MaxProcs {
		return fmt.Errorf("%w: table has %d members, want 1..%d", ErrProtocol, n, MaxProcs)
	}
	if t.NumRanks < 1 || t.NumRanks > n {
		return fmt.Errorf("%w: table has %d ranks for %d members", ErrProtocol, t.NumRanks, n)
	}
	for i, m := range t.Members {
		if m.Proc != uint32(i) {
			return fmt.Errorf("%w: table slot %d holds process %d", ErrProtocol, i, m.Proc)
		}
		if err := checkMember(m); err != nil {
			return fmt.Errorf("%w: process %d: %v", ErrProtocol, i, err)
		}
	}
	return nil
}
