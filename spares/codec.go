package spares

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Encodings. Everything is a msgpack array with positional fields, written
// with the msgpack Encoder and read back with a strict reader: exact field
// counts, unsigned integers only where unsigned is meant, every length
// checked against a cap and against the bytes left before anything is
// allocated, and no trailing bytes.
//
//	command   [kind, fields...]          at most maxCommandSize bytes
//	state     [stateVersion, fields...]  at most maxStateSize bytes
//	          fields: epoch, numRanks, ranks, [[proc, addr, host, raft, ctl]...],
//	          spares, [[proc, epoch]...], status, reason, shrink, voters,
//	          refillWait ns, [[rank, since]...]
const (
	// maxCommandSize caps an encoded command.
	maxCommandSize = 4 << 10
	// maxStateSize caps an encoded state (a snapshot).
	maxStateSize = 256 << 20

	// stateVersion 2 dropped version 1's last checkpoint id (kept by
	// package ckpt alone); 3 added RefillWait and Awaiting at the end.
	// Version 2 is still read (a StateDir written before): it has neither.
	stateVersion = 3

	stateFieldsV2 = 11
	stateFields   = 13
)

// encodeCommand encodes cmd for the log (and the control RPC).
func encodeCommand(cmd command) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	var err error
	switch c := cmd.(type) {
	case declareFailed:
		err = encAll(e.EncodeArrayLen(4), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Proc)),
			e.EncodeUint(uint64(c.Reporter)), e.EncodeUint(c.Epoch))
	case addSpare:
		if verr := c.Info.validate(); verr != nil {
			return nil, badCmd("AddSpare of proc %d: %v", c.Proc, verr)
		}
		err = encAll(e.EncodeArrayLen(6), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Proc)),
			e.EncodeString(c.Info.Addr), e.EncodeString(c.Info.Host), e.EncodeString(c.Info.RaftAddr), e.EncodeString(c.Info.CtlAddr))
	case finish:
		err = encAll(e.EncodeArrayLen(1), e.EncodeUint(uint64(c.Kind())))
	case setVoters:
		if len(c.Voters) > voterCap {
			return nil, badCmd("SetVoters with %d voters, max %d", len(c.Voters), voterCap)
		}
		err = encAll(e.EncodeArrayLen(2), e.EncodeUint(uint64(c.Kind())), encUints(e, c.Voters))
	case endWait:
		if c.Rank < 0 || c.Rank >= maxProcs {
			return nil, badCmd("EndWait of rank %d, want 0..%d", c.Rank, maxProcs-1)
		}
		err = encAll(e.EncodeArrayLen(3), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Rank)), e.EncodeUint(c.Since))
	default:
		return nil, badCmd("cannot encode %T (pass one of the command values)", cmd)
	}
	if err != nil {
		return nil, fmt.Errorf("spares: encode %s: %w", cmd.Kind(), err)
	}
	return buf.Bytes(), nil
}

// decodeCommand decodes a command made by encodeCommand. Any deviation
// (size, field count, type, range, trailing bytes) gives an error wrapping
// errBadCommand that says what was wrong.
func decodeCommand(b []byte) (command, error) {
	if len(b) > maxCommandSize {
		return nil, badCmd("encoded command is %d bytes, max %d", len(b), maxCommandSize)
	}
	d := newDec(b, errBadCommand)
	n := d.arrayLen(8)
	kind := commandKind(d.uint(255))
	want := map[commandKind]int{kindDeclareFailed: 4, kindAddSpare: 6, kindFinish: 1, kindSetVoters: 2, kindEndWait: 3}
	if d.err != nil {
		return nil, d.err
	}
	if w, ok := want[kind]; !ok {
		return nil, badCmd("unknown command kind %d", kind)
	} else if n != w {
		return nil, badCmd("%s has %d fields, want %d", kind, n, w)
	}
	var cmd command
	switch kind {
	case kindDeclareFailed:
		cmd = declareFailed{Proc: uint32(d.uint(uint64(noProc))), Reporter: uint32(d.uint(uint64(noProc))), Epoch: d.uint(^uint64(0))}
	case kindAddSpare:
		c := addSpare{Proc: uint32(d.uint(uint64(noProc)))}
		c.Info = procInfo{Addr: d.str(maxAddrLen), Host: d.str(maxAddrLen), RaftAddr: d.str(maxAddrLen), CtlAddr: d.str(maxAddrLen)}
		cmd = c
	case kindFinish:
		cmd = finish{}
	case kindSetVoters:
		cmd = setVoters{Voters: d.uint32s(voterCap)}
	case kindEndWait:
		cmd = endWait{Rank: int(d.uint(maxProcs - 1)), Since: d.uint(^uint64(0))}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// encodeState encodes s (a snapshot). Maps are written in key order, so
// equal states give equal bytes.
func encodeState(s *state) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	errs := []error{e.EncodeArrayLen(stateFields), e.EncodeUint(stateVersion), e.EncodeUint(s.Epoch), e.EncodeUint(uint64(s.NumRanks)),
		encUints(e, s.Ranks)}
	procs := slices.Sorted(mapsKeys(s.Procs))
	errs = append(errs, e.EncodeArrayLen(len(procs)))
	for _, p := range procs {
		i := s.Procs[p]
		errs = append(errs, e.EncodeArrayLen(5), e.EncodeUint(uint64(p)), e.EncodeString(i.Addr), e.EncodeString(i.Host),
			e.EncodeString(i.RaftAddr), e.EncodeString(i.CtlAddr))
	}
	errs = append(errs, encUints(e, s.Spares))
	failed := slices.Sorted(mapsKeys(s.Failed))
	errs = append(errs, e.EncodeArrayLen(len(failed)))
	for _, p := range failed {
		errs = append(errs, e.EncodeArrayLen(2), e.EncodeUint(uint64(p)), e.EncodeUint(s.Failed[p]))
	}
	errs = append(errs, e.EncodeUint(uint64(s.Status)), e.EncodeString(s.StatusReason),
		e.EncodeBool(s.Shrink), encUints(e, s.Voters), e.EncodeUint(uint64(max(s.RefillWait, 0))), e.EncodeArrayLen(len(s.Awaiting)))
	for _, a := range s.Awaiting {
		errs = append(errs, e.EncodeArrayLen(2), e.EncodeUint(uint64(max(a.Rank, 0))), e.EncodeUint(a.Since))
	}
	if err := encAll(errs...); err != nil {
		return nil, fmt.Errorf("spares: encode state: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeState decodes a state made by encodeState and checks its
// invariants (state.Validate). Errors wrap errBadSnapshot.
func decodeState(b []byte) (state, error) {
	if len(b) > maxStateSize {
		return state{}, fmt.Errorf("%w: %d bytes, max %d", errBadSnapshot, len(b), maxStateSize)
	}
	d := newDec(b, errBadSnapshot)
	n := d.arrayLen(stateFields)
	v := d.uint(255)
	switch {
	case d.err != nil:
		return state{}, d.err
	case v != stateVersion && v != 2:
		return state{}, fmt.Errorf("%w: version %d, this build reads versions 2 and %d", errBadSnapshot, v, stateVersion)
	case v == 2 && n != stateFieldsV2:
		return state{}, fmt.Errorf("%w: version 2 with %d fields, want %d", errBadSnapshot, n, stateFieldsV2)
	case v == stateVersion && n != stateFields:
		return state{}, fmt.Errorf("%w: %d fields, want %d", errBadSnapshot, n, stateFields)
	}
	var s state
	s.Epoch = d.uint(^uint64(0))
	s.NumRanks = int(d.uint(maxProcs))
	s.Ranks = d.uint32s(maxProcs)
	np := d.arrayLen(maxProcs)
	s.Procs = make(map[uint32]procInfo, min(np, 1024))
	for i := 0; i < np && d.err == nil; i++ {
		if d.arrayLen(5) != 5 && d.err == nil {
			d.fail("proc entry %d: want 5 fields", i)
		}
		p := uint32(d.uint(uint64(noProc)))
		info := procInfo{Addr: d.str(maxAddrLen), Host: d.str(maxAddrLen), RaftAddr: d.str(maxAddrLen), CtlAddr: d.str(maxAddrLen)}
		if _, dup := s.Procs[p]; dup && d.err == nil {
			d.fail("proc %d listed twice", p)
		}
		s.Procs[p] = info
	}
	s.Spares = d.uint32s(maxProcs)
	nf := d.arrayLen(maxProcs)
	s.Failed = make(map[uint32]uint64, min(nf, 1024))
	for i := 0; i < nf && d.err == nil; i++ {
		if d.arrayLen(2) != 2 && d.err == nil {
			d.fail("failed entry %d: want 2 fields", i)
		}
		p := uint32(d.uint(uint64(noProc)))
		s.Failed[p] = d.uint(^uint64(0))
	}
	s.Status = jobStatus(d.uint(uint64(statusFailed)))
	s.StatusReason = d.str(maxAddrLen)
	s.Shrink = d.bool()
	s.Voters = d.uint32s(voterCap)
	if v == stateVersion {
		s.RefillWait = time.Duration(d.uint(math.MaxInt64))
		na := d.arrayLen(maxProcs)
		for i := 0; i < na && d.err == nil; i++ {
			if d.arrayLen(2) != 2 && d.err == nil {
				d.fail("awaiting entry %d: want 2 fields", i)
			}
			s.Awaiting = append(s.Awaiting, awaiting{Rank: int(d.uint(maxProcs - 1)), Since: d.uint(^uint64(0))})
		}
	}
	if err := d.finish(); err != nil {
		return state{}, err
	}
	if len(s.Spares) == 0 {
		s.Spares = nil
	}
	if len(s.Voters) == 0 {
		s.Voters = nil
	}
	if err := s.Validate(); err != nil {
		return state{}, err
	}
	return s, nil
}

func mapsKeys[V any](m map[uint32]V) func(func(uint32) bool) {
	return func(yield func(uint32) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func encAll(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func encUints(e *msgpack.Encoder, v []uint32) error {
	if err := e.EncodeArrayLen(len(v)); err != nil {
		return err
	}
	for _, x := range v {
		if err := e.EncodeUint(uint64(x)); err != nil {
			return err
		}
	}
	return nil
}

// dec is a strict msgpack reader over a byte slice. The first error sticks;
// later reads return zero values, and finish reports it.
type dec struct {
	b    []byte
	r    *bytes.Reader
	d    *msgpack.Decoder
	err  error
	kind error // sentinel wrapped by every error
}

func newDec(b []byte, kind error) *dec {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r) // a *bytes.Reader is read directly, unbuffered
	return &dec{b: b, r: r, d: d, kind: kind}
}

func (d *dec) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", d.kind, d.pos(), fmt.Sprintf(format, a...))
	}
}

func (d *dec) pos() int       { return len(d.b) - d.r.Len() }
func (d *dec) rest() []byte   { return d.b[d.pos():] }
func (d *dec) remaining() int { return d.r.Len() }

func (d *dec) peek() (byte, bool) {
	if d.err != nil {
		return 0, false
	}
	if d.remaining() == 0 {
		d.fail("unexpected end of input")
		return 0, false
	}
	return d.rest()[0], true
}

// uint reads an unsigned integer no larger than max.
func (d *dec) uint(max uint64) uint64 {
	c, ok := d.peek()
	if !ok {
		return 0
	}
	positiveFixnum := c <= msgpcode.PosFixedNumHigh
	if !positiveFixnum && c != msgpcode.Uint8 && c != msgpcode.Uint16 && c != msgpcode.Uint32 && c != msgpcode.Uint64 {
		d.fail("want an unsigned integer, got code 0x%02x", c)
		return 0
	}
	v, err := d.d.DecodeUint64()
	if err != nil {
		d.fail("%v", err)
		return 0
	}
	if v > max {
		d.fail("value %d is above the limit %d", v, max)
		return 0
	}
	return v
}

// arrayLen reads an array header of at most max elements (and no more
// elements than bytes left, since each takes at least one).
func (d *dec) arrayLen(max int) int {
	c, ok := d.peek()
	if !ok {
		return 0
	}
	if !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		d.fail("want an array, got code 0x%02x", c)
		return 0
	}
	n, err := d.d.DecodeArrayLen()
	if err != nil {
		d.fail("%v", err)
		return 0
	}
	if n < 0 || n > max || n > d.remaining() {
		d.fail("array of %d elements (limit %d, %d bytes left)", n, max, d.remaining())
		return 0
	}
	return n
}

func (d *dec) uint32s(max int) []uint32 {
	n := d.arrayLen(max)
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(d.uint(uint64(^uint32(0))))
	}
	return out
}

// str reads a string of at most max bytes; the length is checked from the
// header before the decoder allocates.
func (d *dec) str(max int) string {
	c, ok := d.peek()
	if !ok {
		return ""
	}
	rest := d.rest()
	var n, hdr int
	switch {
	case msgpcode.IsFixedString(c):
		n, hdr = int(c&msgpcode.FixedStrMask), 1
	case c == msgpcode.Str8 && len(rest) >= 2:
		n, hdr = int(rest[1]), 2
	case c == msgpcode.Str16 && len(rest) >= 3:
		n, hdr = int(binary.BigEndian.Uint16(rest[1:])), 3
	case c == msgpcode.Str32 && len(rest) >= 5:
		n, hdr = int(binary.BigEndian.Uint32(rest[1:])), 5
	default:
		d.fail("want a string, got code 0x%02x", c)
		return ""
	}
	if n > max || n > len(rest)-hdr {
		d.fail("string of %d bytes (limit %d, %d bytes left)", n, max, len(rest)-hdr)
		return ""
	}
	s, err := d.d.DecodeString()
	if err != nil {
		d.fail("%v", err)
	}
	return s
}

// bin reads a byte string of at most max bytes.
func (d *dec) bin(max int) []byte {
	c, ok := d.peek()
	if !ok {
		return nil
	}
	rest := d.rest()
	var n, hdr int
	switch {
	case c == msgpcode.Bin8 && len(rest) >= 2:
		n, hdr = int(rest[1]), 2
	case c == msgpcode.Bin16 && len(rest) >= 3:
		n, hdr = int(binary.BigEndian.Uint16(rest[1:])), 3
	case c == msgpcode.Bin32 && len(rest) >= 5:
		n, hdr = int(binary.BigEndian.Uint32(rest[1:])), 5
	default:
		d.fail("want a byte string, got code 0x%02x", c)
		return nil
	}
	if n > max || n > len(rest)-hdr {
		d.fail("byte string of %d bytes (limit %d, %d bytes left)", n, max, len(rest)-hdr)
		return nil
	}
	b, err := d.d.DecodeBytes()
	if err != nil {
		d.fail("%v", err)
	}
	return b
}

func (d *dec) bool() bool {
	c, ok := d.peek()
	if !ok {
		return false
	}
	if c != msgpcode.True && c != msgpcode.False {
		d.fail("want a bool, got code 0x%02x", c)
		return false
	}
	v, err := d.d.DecodeBool()
	if err != nil {
		d.fail("%v", err)
	}
	return v
}

func (d *dec) finish() error {
	if d.err == nil && d.remaining() != 0 {
		d.fail("%d trailing bytes", d.remaining())
	}
	return d.err
}
