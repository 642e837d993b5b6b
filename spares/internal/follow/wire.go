package follow

import (
	"bytes"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// The tree's news. A client keeps one control connection to the process
// above it in the tree (its parent, or while that one does not answer the
// next one up, then a voter) and asks on it, again and again, for what is
// newer than its version:
//
//	request  [ctlVersion, Op, payload [have, full]]
//	answer   [code, version, leader, fresh, age µs, state bytes, [[index, command bytes]...]]
//
// The parent answers at once when it holds a newer version, else after
// Config.Hold with nothing new (a keepalive). Every answer carries the
// leader the parent knows of and how long ago the parent itself last had
// contact with the membership's quorum (fresh false: never), so the
// child's contact is its ancestors' contact, however deep it is. A news
// that reaches a parent goes down at once: a change reaches every process
// in depth (log_k N) hops.

// Op is the control request's op of the tree's news.
const Op = 3

// noProc names no process (the membership's NoProc).
const noProc = ^uint32(0)

// Limits bound what an answer may carry.
type Limits struct {
	State   int // bytes of an encoded state
	Command int // bytes of an encoded command
	Entries int // changes kept to pass on
}

// Frame caps an answer: a whole state and the changes kept.
func (l Limits) Frame() int { return l.State + l.Entries*(l.Command+32) + 1024 }

// Entry is one change a parent passes on: its Raft index and the encoded
// command.
type Entry struct {
	Index uint64
	Data  []byte
}

// Update is what a parent sends a child: nothing new (Version not above
// the child's), the changes after the child's version, or the whole state.
type Update struct {
	Version uint64
	Entries []Entry
	State   []byte // the encoded state at Version, when Entries cannot do
}

// Answer is a parent's answer.
type Answer struct {
	Code   string
	Update Update
	Leader uint32
	Fresh  bool          // the parent had contact with the quorum once
	Age    time.Duration // how long ago it last had
}

// EncodeRequest is the payload of a request for what is newer than have
// (full: the whole state).
func EncodeRequest(have uint64, full bool) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := wire.EncAll(e.EncodeArrayLen(2), e.EncodeUint(have), e.EncodeBool(full)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeRequest reads a request's payload.
func DecodeRequest(payload []byte) (have uint64, full bool, err error) {
	d := wire.NewDec(payload, wire.ErrProtocol)
	if n := d.ArrayLen(2); d.Err() == nil && n != 2 {
		return 0, false, fmt.Errorf("%w: follow request has %d fields, want 2", wire.ErrProtocol, n)
	}
	have = d.Uint(^uint64(0))
	full = d.Bool()
	return have, full, d.Finish()
}

// EncodeAnswer encodes a.
func EncodeAnswer(a Answer) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	state := a.Update.State
	if state == nil {
		state = []byte{}
	}
	err := wire.EncAll(e.EncodeArrayLen(7), e.EncodeString(a.Code), e.EncodeUint(a.Update.Version), e.EncodeUint(uint64(a.Leader)),
		e.EncodeBool(a.Fresh), e.EncodeUint(uint64(max(a.Age, 0)/time.Microsecond)), e.EncodeBytes(state), e.EncodeArrayLen(len(a.Update.Entries)))
	for _, en := range a.Update.Entries {
		if err != nil {
			break
		}
		err = wire.EncAll(e.EncodeArrayLen(2), e.EncodeUint(en.Index), e.EncodeBytes(en.Data))
	}
	return buf.Bytes(), err
}

// DecodeAnswer reads an answer within lim.
func DecodeAnswer(b []byte, lim Limits) (Answer, error) {
	var a Answer
	d := wire.NewDec(b, wire.ErrProtocol)
	if n := d.ArrayLen(7); d.Err() == nil && n != 7 {
		return a, fmt.Errorf("%w: follow answer has %d fields, want 7", wire.ErrProtocol, n)
	}
	a.Code = d.Str(64)
	a.Update.Version = d.Uint(^uint64(0))
	a.Leader = uint32(d.Uint(uint64(noProc)))
	a.Fresh = d.Bool()
	a.Age = time.Duration(d.Uint(uint64(1<<62/time.Microsecond))) * time.Microsecond
	if st := d.Bin(lim.State); len(st) > 0 {
		a.Update.State = st
	}
	n := d.ArrayLen(lim.Entries)
	last := uint64(0)
	for i := 0; i < n && d.Err() == nil; i++ {
		if m := d.ArrayLen(2); d.Err() == nil && m != 2 {
			return a, fmt.Errorf("%w: follow entry has %d fields, want 2", wire.ErrProtocol, m)
		}
		en := Entry{Index: d.Uint(^uint64(0)), Data: d.Bin(lim.Command)}
		if d.Err() == nil && (en.Index <= last || en.Index > a.Update.Version) {
			return a, fmt.Errorf("%w: follow entry index %d after %d, version %d", wire.ErrProtocol, en.Index, last, a.Update.Version)
		}
		last = en.Index
		a.Update.Entries = append(a.Update.Entries, en)
	}
	return a, d.Finish()
}
