package bootstrap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ServerID is the id the rendezvous server presents in the job-token
// handshake (auth.PurposeRendezvous); processes present their Proc.
const ServerID uint32 = 0xFFFFFFFF

// JoinerID is the id a joiner without a reserved id presents in the
// job-token handshake; the rendezvous accepts it only with a join hello,
// and assigns the joiner its id.
const JoinerID uint32 = 0xFFFFFFFE

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
	// KindShrink: the process's job goes on with fewer ranks when one is
	// lost with no spare left (spares.Config.Shrink), so a death is
	// survived even without spares: a launcher that would end the job at
	// the first death keeps it going. Sent once, at start.
	KindShrink = "shrink"
	// KindDisconnected is made by the Server itself, never sent by a
	// process: the process's registered connection closed (before the table
	// was complete, the process must register again). It follows every
	// report that came over that connection.
	KindDisconnected = "disconnected"
	// KindJoined is made by the Server itself, never sent by a process: a
	// process started after the job formed registered as a joiner and was
	// given the id Proc; Text says "pid <pid> on <host>". A launcher learns
	// so of joiners it did not start.
	KindJoined = "joined"
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
	// RefillWait is how long the membership waits for a replacement
	// (ServerConfig.RefillWait). It travels in the table because every
	// process, joiners included, must use the same value.
	RefillWait time.Duration `msgpack:"refill_wait,omitempty"`
	// Joined, in a joiner's answer only, lists the processes that joined
	// before it, as they registered (id order): whom it can ask for the
	// membership when the job's first processes, its voters among them,
	// are gone. Members stays the original table, which the membership's
	// initial state is built from.
	Joined []Member `msgpack:"joined,omitempty"`
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
	case KindRole, KindFinished, KindError, KindEvent, KindVacant, KindShrink:
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
	// A joiner's hello (hello.Join) is answered with msgAck while the
	// table is not complete, then with one of these.
	msgJoined   uint8 = 6 // server -> joiner: the original table and the joiner's id (Proc)
	msgFinished uint8 = 7 // server -> joiner: the job has ended, nothing to join; then close
	// The table's way down (relay.go): a process the rendezvous does not
	// write the table to gets msgRelay, fetches the table from a relay,
	// and asks the rendezvous with msgTableAsk only when none gave it.
	msgRelay    uint8 = 8 // server -> process: the table is complete; Relay says where to fetch it
	msgTableAsk uint8 = 9 // process -> server: send the table (no relay gave it)
)

type hello struct {
	Version  int    `msgpack:"v"`
	NumProcs int    `msgpack:"nprocs"`
	NumRanks int    `msgpack:"nranks"`
	JobID    string `msgpack:"job"`
	Member   Member `msgpack:"member"`
	// Join marks a joiner's hello: a process started after the job formed,
	// which presents a reserved id or JoinerID, and whose NumProcs and
	// NumRanks may be 0 (unknown). A server that predates it ignores the
	// field and refuses the id as out of range.
	Join bool `msgpack:"join,omitempty"`
	// Relay is the address of the process's table relay (relay.go), ""
	// without one.
	Relay string `msgpack:"relay,omitempty"`
}

type envelope struct {
	Kind   uint8   `msgpack:"k"`
	Hello  *hello  `msgpack:"h,omitempty"`
	Table  *Table  `msgpack:"t,omitempty"`
	Reason string  `msgpack:"r,omitempty"`
	Report *Report `msgpack:"p,omitempty"`
	// Proc is the id the rendezvous gave a joiner, in msgJoined and in the
	// msgAck that answers a join hello (so that a joiner that loses the
	// connection presents it again rather than take a second id).
	Proc uint32 `msgpack:"id,omitempty"`
	// Relay, in msgRelay, names the processes to fetch the table from.
	Relay *relayNotice `msgpack:"l,omitempty"`
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
	body, err := readFrame(r, max)
	if err != nil {
		return nil, err
	}
	return decodeBody(body)
}

// readFrame reads one framed message of at most max bytes and returns its
// body undecoded.
func readFrame(r io.Reader, max int) ([]byte, error) {
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
	return body, nil
}

func decodeBody(body []byte) (*envelope, error) {
	if err := checkShape(body); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
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
	case msgTable, msgJoined:
		if e.Table == nil {
			return nil, fmt.Errorf("%w: table message without table", ErrProtocol)
		}
	case msgReport:
		if e.Report == nil {
			return nil, fmt.Errorf("%w: report message without report", ErrProtocol)
		}
	case msgRelay:
		if e.Relay == nil {
			return nil, fmt.Errorf("%w: relay notice without body", ErrProtocol)
		}
		if err := e.Relay.check(); err != nil {
			return nil, err
		}
	case msgAck, msgReject, msgFinished, msgTableAsk:
	default:
		return nil, fmt.Errorf("%w: unknown message kind %d", ErrProtocol, e.Kind)
	}
	return &e, nil
}

// Limits of checkShape. No message nests deeper than 5 (envelope, table,
// members, member, extra), and no collection is longer than the member
// table.
const (
	maxDepth      = 16
	maxCollection = MaxProcs
)

// checkShape walks the msgpack value in b before it is decoded, and
// refuses it unless it is exactly one complete value whose every array and
// map holds at most maxCollection entries, no more than the bytes that
// follow its header could hold, nested at most maxDepth deep. The decoder
// sizes a slice from the length on the wire before it reads an element,
// and skips unknown fields recursively: without this walk a 5-byte array
// header makes it allocate gigabytes, and deep nesting exhausts the stack.
func checkShape(b []byte) error {
	rest, err := shapeValue(b, 0)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%d trailing bytes", len(rest))
	}
	return nil
}

// shapeValue checks the value at the start of b and returns what follows.
func shapeValue(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("message cut short")
	}
	c := b[0]
	b = b[1:]
	// A value is n bytes (per == 0) or a collection of n entries of per
	// values each; hdr > 0: n is in the next hdr bytes, big-endian.
	var hdr, n, per int
	ext := false // ext 8/16/32: a type byte follows the length
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return b, nil
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n = int(c & 0x1f)
	case c == 0xd9 || c == 0xc4: // str8, bin8
		hdr = 1
	case c == 0xda || c == 0xc5: // str16, bin16
		hdr = 2
	case c == 0xdb || c == 0xc6: // str32, bin32
		hdr = 4
	case c == 0xcc || c == 0xd0: // uint8, int8
		n = 1
	case c == 0xcd || c == 0xd1: // uint16, int16
		n = 2
	case c == 0xce || c == 0xd2 || c == 0xca: // uint32, int32, float32
		n = 4
	case c == 0xcf || c == 0xd3 || c == 0xcb: // uint64, int64, float64
		n = 8
	case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16
		n = 1 + 1<<(c-0xd4)
	case c >= 0xc7 && c <= 0xc9: // ext 8, 16, 32
		hdr, ext = 1<<(c-0xc7), true
	case c >= 0x80 && c <= 0x8f: // fixmap
		n, per = int(c&0x0f), 2
	case c >= 0x90 && c <= 0x9f: // fixarray
		n, per = int(c&0x0f), 1
	case c == 0xdc || c == 0xdd: // array16, array32
		hdr, per = 2<<(c-0xdc), 1
	case c == 0xde || c == 0xdf: // map16, map32
		hdr, per = 2<<(c-0xde), 2
	default:
		return nil, fmt.Errorf("unknown msgpack code 0x%02x", c)
	}
	if hdr > 0 {
		if len(b) < hdr {
			return nil, fmt.Errorf("length cut short")
		}
		var v uint64
		for _, x := range b[:hdr] {
			v = v<<8 | uint64(x)
		}
		b = b[hdr:]
		if v > uint64(len(b)) {
			return nil, fmt.Errorf("length %d with %d bytes left", v, len(b))
		}
		n = int(v)
	}
	if ext {
		if len(b) < 1 {
			return nil, fmt.Errorf("ext type cut short")
		}
		b = b[1:]
	}
	if per == 0 {
		if n > len(b) {
			return nil, fmt.Errorf("value of %d bytes with %d bytes left", n, len(b))
		}
		return b[n:], nil
	}
	if depth >= maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	if n > maxCollection || n*per > len(b) {
		return nil, fmt.Errorf("collection of %d entries with %d bytes left (at most %d entries)", n, len(b), maxCollection)
	}
	var err error
	for i := 0; i < n*per; i++ {
		if b, err = shapeValue(b, depth+1); err != nil {
			return nil, err
		}
	}
	return b, nil
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
	if t.RefillWait < 0 {
		return fmt.Errorf("%w: table has a negative refill wait (%v)", ErrProtocol, t.RefillWait)
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
