package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Proc identifies a process of a job: 0..NumProcs-1, fixed for the life of
// the process. Ranks are assigned to processes by the membership; spares are
// processes without a rank.
type Proc uint32

// NoProc is the Proc value that names no process.
const NoProc Proc = ^Proc(0)

// FrameType says what a frame asks of its receiver. Values are part of the
// wire format.
type FrameType uint8

// Frame types. The transport itself only interprets none of them; they are
// listed here so every layer shares one numbering.
const (
	FrameInvalid    FrameType = iota
	FrameWrite                // payload -> (Seg, Off); Flags may carry FlagNotify
	FrameNotify               // set notification A=id to B=value in Seg
	FrameAck                  // Seq = highest sequence applied; A = error code for Seq when nonzero
	FrameReadReq              // read A bytes at (Seg, Off); reply FrameReadResp with the same Seq
	FrameReadResp             // payload = data for request Seq; A = error code when nonzero
	FrameAtomicReq            // Flags = atomic op; (Seg, Off) word; A, B operands; reply FrameAtomicResp
	FrameAtomicResp           // A = old value; B = error code
	FramePassive              // small two-sided message; payload = message
	FrameColl                 // collective step: Seg = group tag, Off = collective sequence, A = round
	FrameHeartbeat            // failure detector traffic; payload = encoded detector message
	FrameControl              // membership / recovery control; payload = encoded message
	FrameLink                 // a transport's own, about the connection it comes on (tcp: its idle close); never handed to a Handler
	frameTypeCount
)

// Valid reports whether t is a known frame type.
func (t FrameType) Valid() bool { return t > FrameInvalid && t < frameTypeCount }

// Header flags.
const (
	// FlagNotify on a FrameWrite: after the payload is in place, set
	// notification A to value B in the same segment.
	FlagNotify uint8 = 1 << 0
	// FlagAck asks the receiver to acknowledge Seq once the frame is applied.
	FlagAck uint8 = 1 << 1
	// FlagDirect marked a doorbell: a FrameWrite without payload whose
	// data the sender had copied into the receiver's segment beforehand.
	// No process sends it any more (a copy ahead of frames still on their
	// way broke their order, docs/design.md §9.3); a receiver refuses it.
	FlagDirect uint8 = 1 << 2
)

// HeaderSize is the encoded size of a Header in bytes.
const HeaderSize = 56

// MaxPayload is the hard cap on one frame's payload; larger transfers are
// split by the sender. Decoders reject anything larger before allocating.
const MaxPayload = 64 << 20

// Header is the fixed part of every frame. Field meanings depend on Type;
// see the FrameType constants.
//
// Wire layout, little-endian:
//
//	0  Len    uint32  payload length in bytes
//	4  Type   uint8
//	5  Flags  uint8
//	6  Seg    uint16  segment ID (or group tag for FrameColl)
//	8  Epoch  uint32  sender's membership epoch
//	12 Src    uint32  sender's Proc
//	16 Seq    uint64  sequence number or request ID
//	24 Off    uint64  byte offset in the segment
//	32 A      uint64  operand
//	40 B      uint64  operand
//	48 Ack    uint64  cumulative acknowledgement of the receiver's sequenced
//	                  frames, carried on any frame going back (0: none)
type Header struct {
	Len   uint32
	Type  FrameType
	Flags uint8
	Seg   uint16
	Epoch uint32
	Src   Proc
	Seq   uint64
	Off   uint64
	A     uint64
	B     uint64
	Ack   uint64
}

// Encode writes h into b, which must hold HeaderSize bytes.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], h.Len)
	b[4] = byte(h.Type)
	b[5] = h.Flags
	binary.LittleEndian.PutUint16(b[6:], h.Seg)
	binary.LittleEndian.PutUint32(b[8:], h.Epoch)
	binary.LittleEndian.PutUint32(b[12:], uint32(h.Src))
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.Off)
	binary.LittleEndian.PutUint64(b[32:], h.A)
	binary.LittleEndian.PutUint64(b[40:], h.B)
	binary.LittleEndian.PutUint64(b[48:], h.Ack)
}

// DecodeHeader parses and checks a header. It rejects short input, unknown
// frame types and payload lengths above MaxPayload, so that nothing is ever
// allocated from an unchecked length.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: header is %d bytes, want %d", ErrBadFrame, len(b), HeaderSize)
	}
	h.Len = binary.LittleEndian.Uint32(b[0:])
	h.Type = FrameType(b[4])
	h.Flags = b[5]
	h.Seg = binary.LittleEndian.Uint16(b[6:])
	h.Epoch = binary.LittleEndian.Uint32(b[8:])
	h.Src = Proc(binary.LittleEndian.Uint32(b[12:]))
	h.Seq = binary.LittleEndian.Uint64(b[16:])
	h.Off = binary.LittleEndian.Uint64(b[24:])
	h.A = binary.LittleEndian.Uint64(b[32:])
	h.B = binary.LittleEndian.Uint64(b[40:])
	h.Ack = binary.LittleEndian.Uint64(b[48:])
	if !h.Type.Valid() {
		return h, fmt.Errorf("%w: unknown frame type %d", ErrBadFrame, h.Type)
	}
	if h.Len > MaxPayload {
		return h, fmt.Errorf("%w: payload length %d above cap %d", ErrBadFrame, h.Len, MaxPayload)
	}
	return h, nil
}

// Payload is a received frame's payload, offered to the Handler before it is
// read so that it can land directly in its destination.
type Payload interface {
	// Len is the payload length in bytes (Header.Len).
	Len() int
	// ReadInto reads the whole payload into dst; len(dst) must equal Len().
	ReadInto(dst []byte) error
	// Discard drops the payload.
	Discard() error
}

// Handler receives what a transport delivers.
type Handler interface {
	// HandleFrame is called once per received frame; see the package
	// contract. It must consume p (ReadInto or Discard) before returning. An
	// error returned here is counted and the frame is dropped, but the
	// connection survives: it is for frames that are well formed but not
	// acceptable (a stale epoch, a bad segment ID).
	HandleFrame(from Proc, h *Header, p Payload) error
	// PeerDown is called when the connection to a peer fails.
	PeerDown(peer Proc, err error)
}

// Transport sends frames to the other processes of a job.
type Transport interface {
	// Self returns this process's ID.
	Self() Proc
	// Start begins delivering received frames to h. It is called once,
	// before any Send.
	Start(h Handler) error
	// Send sends one frame to a peer. h.Len is set by Send from the payload
	// length, and h.Src to Self(). Sends to one peer are delivered in order.
	// Send returns once payload may be reused.
	Send(ctx context.Context, to Proc, h *Header, payload []byte) error
	// Close stops the transport. It is idempotent.
	Close() error
}

var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("transport: closed")
	// ErrPeerDown is wrapped by Send errors to a peer whose connection failed.
	ErrPeerDown = errors.New("transport: peer down")
	// ErrUnknownPeer is returned by Send to a Proc the transport has no
	// address for.
	ErrUnknownPeer = errors.New("transport: unknown peer")
	// ErrNoSharedMemory is returned by MemorySharer.FetchMemory when
	// this process cannot share memory with the peer, and never will (it
	// is on another host, or in another container of the host whose
	// shared memory it cannot reach): asking again cannot help.
	ErrNoSharedMemory = errors.New("transport: no shared memory with the peer")
	// ErrBadFrame is wrapped by DecodeHeader and by receivers on malformed
	// input. The frame is rejected and the connection closed.
	ErrBadFrame = errors.New("transport: bad frame")
	// ErrTooLarge is returned by Send for a payload above MaxPayload.
	ErrTooLarge = errors.New("transport: payload too large")
	// ErrAuth is returned when a peer fails the job-token handshake.
	ErrAuth = errors.New("transport: authentication failed")
	// ErrNoPath is wrapped by a Send that could not reach the peer this
	// way at all and sent nothing (transport/shm: the peer is in another
	// network namespace, or refused the handshake): the peer may well be
	// alive on another path, and a router (transport/route) takes one.
	ErrNoPath = errors.New("transport: no path to peer on this transport")
)

// BytesPayload is a Payload over a byte slice, for in-memory transports and
// tests.
type BytesPayload []byte

// Len returns len(b).
func (b BytesPayload) Len() int { return len(b) }

// ReadInto copies b into dst.
func (b BytesPayload) ReadInto(dst []byte) error {
	if len(dst) != len(b) {
		return fmt.Errorf("transport: ReadInto with %d bytes for a %d-byte payload", len(dst), len(b))
	}
	copy(dst, b)
	return nil
}

// Discard does nothing.
func (b BytesPayload) Discard() error { return nil }
