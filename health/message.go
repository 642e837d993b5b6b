package health

import (
	"encoding/binary"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

// Kind says what a detector message asks or answers. Values are part of
// the wire format.
type Kind uint8

// Message kinds.
const (
	KindInvalid Kind = iota
	// KindPing asks Target (the receiver) to answer KindAck with the same Seq.
	KindPing
	// KindAck answers a KindPing; Target is the sender (the pinged process).
	KindAck
	// KindPingReq asks a helper to probe Target on the sender's behalf.
	// Seq is the sender's suspicion ID, echoed in the answer.
	KindPingReq
	// KindIndirectAck tells the observer that Target answered the helper's
	// probe: the suspicion Seq is refuted.
	KindIndirectAck
	// KindIndirectNack tells the observer that Target did not answer the
	// helper's probe in time, or that the helper's connection to Target is
	// down. It counts towards confirming suspicion Seq.
	KindIndirectNack
	kindCount
)

var kindNames = [...]string{"invalid", "ping", "ack", "ping-req", "indirect-ack", "indirect-nack"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known message kind.
func (k Kind) Valid() bool { return k > KindInvalid && k < kindCount }

// Message is one detector message. It travels as the payload of a
// transport.FrameHeartbeat frame; the frame header says who sent it.
type Message struct {
	Kind Kind
	// Seq is a ping's sequence number (echoed by its Ack) or, on
	// KindPingReq and the indirect answers, the observer's suspicion ID.
	// Sequence numbers of one process only grow, so an Ack with a Seq at
	// or above a mark proves the target answered a ping sent after it.
	Seq uint64
	// Target is the process the message is about: the pinged process on
	// Ping and Ack, the suspect on PingReq and the indirect answers.
	Target transport.Proc
}

// MessageSize is the encoded size of a Message in bytes.
//
// Wire layout, little-endian:
//
//	0  Version  uint8   MessageVersion
//	1  Kind     uint8
//	2  reserved uint16  zero
//	4  Target   uint32
//	8  Seq      uint64
const MessageSize = 16

// MessageVersion is the wire format version written in byte 0.
const MessageVersion = 1

// Validate checks that m can be sent: a known kind and a real target.
func (m Message) Validate() error {
	if !m.Kind.Valid() {
		return fmt.Errorf("%w: unknown kind %d", ErrBadMessage, uint8(m.Kind))
	}
	if m.Target == transport.NoProc {
		return fmt.Errorf("%w: %v without a target", ErrBadMessage, m.Kind)
	}
	return nil
}

// Encode writes m into b, which must hold at least MessageSize bytes, and
// returns the number of bytes written. It rejects invalid messages and short
// buffers with an error wrapping ErrBadMessage.
func (m Message) Encode(b []byte) (int, error) {
	if err := m.Validate(); err != nil {
		return 0, err
	}
	if len(b) < MessageSize {
		return 0, fmt.Errorf("%w: encode buffer is %d bytes, want %d", ErrBadMessage, len(b), MessageSize)
	}
	b[0] = MessageVersion
	b[1] = byte(m.Kind)
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(m.Target))
	binary.LittleEndian.PutUint64(b[8:], m.Seq)
	return MessageSize, nil
}

// AppendMessage appends the encoding of m to dst.
func AppendMessage(dst []byte, m Message) ([]byte, error) {
	var b [MessageSize]byte
	if _, err := m.Encode(b[:]); err != nil {
		return dst, err
	}
	return append(dst, b[:]...), nil
}

// DecodeMessage parses exactly one encoded message. Anything else (a short
// or long buffer, another version, an unknown kind, nonzero reserved bytes,
// transport.NoProc as target) is rejected with an error wrapping
// ErrBadMessage that says what was wrong.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if len(b) != MessageSize {
		return m, fmt.Errorf("%w: %d bytes, want exactly %d", ErrBadMessage, len(b), MessageSize)
	}
	if b[0] != MessageVersion {
		return m, fmt.Errorf("%w: version %d, this build speaks version %d", ErrBadMessage, b[0], MessageVersion)
	}
	if b[2] != 0 || b[3] != 0 {
		return m, fmt.Errorf("%w: reserved bytes are %#02x %#02x, want zero", ErrBadMessage, b[2], b[3])
	}
	m.Kind = Kind(b[1])
	m.Target = transport.Proc(binary.LittleEndian.Uint32(b[4:]))
	m.Seq = binary.LittleEndian.Uint64(b[8:])
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func (m Message) String() string {
	return fmt.Sprintf("%v(target=%d seq=%d)", m.Kind, m.Target, m.Seq)
}
