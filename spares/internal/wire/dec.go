// Package wire is the strict msgpack reader of the membership's
// encodings (commands, states, control requests and the tree's news):
// it knows msgpack, nothing of the membership.
package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// EncAll returns the first of the errors of a row of encoder calls.
func EncAll(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Dec is a strict msgpack reader over a byte slice. The first error sticks;
// later reads return zero values, and Finish reports it.
type Dec struct {
	b    []byte
	r    *bytes.Reader
	d    *msgpack.Decoder
	err  error
	kind error // sentinel wrapped by every error
}

// NewDec reads b; every error it reports wraps kind.
func NewDec(b []byte, kind error) *Dec {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r) // a *bytes.Reader is read directly, unbuffered
	return &Dec{b: b, r: r, d: d, kind: kind}
}

// Fail records an error at the current byte, unless one is recorded.
func (d *Dec) Fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", d.kind, d.pos(), fmt.Sprintf(format, a...))
	}
}

func (d *Dec) pos() int     { return len(d.b) - d.r.Len() }
func (d *Dec) rest() []byte { return d.b[d.pos():] }

// Remaining is how many bytes are left.
func (d *Dec) Remaining() int { return d.r.Len() }

func (d *Dec) peek() (byte, bool) {
	if d.err != nil {
		return 0, false
	}
	if d.Remaining() == 0 {
		d.Fail("unexpected end of input")
		return 0, false
	}
	return d.rest()[0], true
}

// Uint reads an unsigned integer no larger than max.
func (d *Dec) Uint(max uint64) uint64 {
	c, ok := d.peek()
	if !ok {
		return 0
	}
	positiveFixnum := c <= msgpcode.PosFixedNumHigh
	if !positiveFixnum && c != msgpcode.Uint8 && c != msgpcode.Uint16 && c != msgpcode.Uint32 && c != msgpcode.Uint64 {
		d.Fail("want an unsigned integer, got code 0x%02x", c)
		return 0
	}
	v, err := d.d.DecodeUint64()
	if err != nil {
		d.Fail("%v", err)
		return 0
	}
	if v > max {
		d.Fail("value %d is above the limit %d", v, max)
		return 0
	}
	return v
}

// ArrayLen reads an array header of at most max elements (and no more
// elements than bytes left, since each takes at least one).
func (d *Dec) ArrayLen(max int) int {
	c, ok := d.peek()
	if !ok {
		return 0
	}
	if !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		d.Fail("want an array, got code 0x%02x", c)
		return 0
	}
	n, err := d.d.DecodeArrayLen()
	if err != nil {
		d.Fail("%v", err)
		return 0
	}
	if n < 0 || n > max || n > d.Remaining() {
		d.Fail("array of %d elements (limit %d, %d bytes left)", n, max, d.Remaining())
		return 0
	}
	return n
}

// Uint32s reads an array of at most max uint32s.
func (d *Dec) Uint32s(max int) []uint32 {
	n := d.ArrayLen(max)
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(d.Uint(uint64(^uint32(0))))
	}
	return out
}

// Str reads a string of at most max bytes; the length is checked from the
// header before the decoder allocates.
func (d *Dec) Str(max int) string {
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
		d.Fail("want a string, got code 0x%02x", c)
		return ""
	}
	if n > max || n > len(rest)-hdr {
		d.Fail("string of %d bytes (limit %d, %d bytes left)", n, max, len(rest)-hdr)
		return ""
	}
	s, err := d.d.DecodeString()
	if err != nil {
		d.Fail("%v", err)
	}
	return s
}

// Bin reads a byte string of at most max bytes.
func (d *Dec) Bin(max int) []byte {
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
		d.Fail("want a byte string, got code 0x%02x", c)
		return nil
	}
	if n > max || n > len(rest)-hdr {
		d.Fail("byte string of %d bytes (limit %d, %d bytes left)", n, max, len(rest)-hdr)
		return nil
	}
	b, err := d.d.DecodeBytes()
	if err != nil {
		d.Fail("%v", err)
	}
	return b
}

// Bool reads a bool.
func (d *Dec) Bool() bool {
	c, ok := d.peek()
	if !ok {
		return false
	}
	if c != msgpcode.True && c != msgpcode.False {
		d.Fail("want a bool, got code 0x%02x", c)
		return false
	}
	v, err := d.d.DecodeBool()
	if err != nil {
		d.Fail("%v", err)
	}
	return v
}

// Finish reports the first error, or trailing bytes.
func (d *Dec) Finish() error {
	if d.err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
	return d.err
}

// Err is the first error so far, nil if none.
func (d *Dec) Err() error { return d.err }
