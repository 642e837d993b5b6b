package spares

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
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
		err = wire.EncAll(e.EncodeArrayLen(4), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Proc)),
			e.EncodeUint(uint64(c.Reporter)), e.EncodeUint(c.Epoch))
	case addSpare:
		if verr := c.Info.validate(); verr != nil {
			return nil, badCmd("AddSpare of proc %d: %v", c.Proc, verr)
		}
		err = wire.EncAll(e.EncodeArrayLen(6), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Proc)),
			e.EncodeString(c.Info.Addr), e.EncodeString(c.Info.Host), e.EncodeString(c.Info.RaftAddr), e.EncodeString(c.Info.CtlAddr))
	case finish:
		err = wire.EncAll(e.EncodeArrayLen(1), e.EncodeUint(uint64(c.Kind())))
	case setVoters:
		if len(c.Voters) > voterCap {
			return nil, badCmd("SetVoters with %d voters, max %d", len(c.Voters), voterCap)
		}
		err = wire.EncAll(e.EncodeArrayLen(2), e.EncodeUint(uint64(c.Kind())), encUints(e, c.Voters))
	case endWait:
		if c.Rank < 0 || c.Rank >= maxProcs {
			return nil, badCmd("EndWait of rank %d, want 0..%d", c.Rank, maxProcs-1)
		}
		err = wire.EncAll(e.EncodeArrayLen(3), e.EncodeUint(uint64(c.Kind())), e.EncodeUint(uint64(c.Rank)), e.EncodeUint(c.Since))
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
	d := wire.NewDec(b, errBadCommand)
	n := d.ArrayLen(8)
	kind := commandKind(d.Uint(255))
	want := map[commandKind]int{kindDeclareFailed: 4, kindAddSpare: 6, kindFinish: 1, kindSetVoters: 2, kindEndWait: 3}
	if d.Err() != nil {
		return nil, d.Err()
	}
	if w, ok := want[kind]; !ok {
		return nil, badCmd("unknown command kind %d", kind)
	} else if n != w {
		return nil, badCmd("%s has %d fields, want %d", kind, n, w)
	}
	var cmd command
	switch kind {
	case kindDeclareFailed:
		cmd = declareFailed{Proc: uint32(d.Uint(uint64(noProc))), Reporter: uint32(d.Uint(uint64(noProc))), Epoch: d.Uint(^uint64(0))}
	case kindAddSpare:
		c := addSpare{Proc: uint32(d.Uint(uint64(noProc)))}
		c.Info = procInfo{Addr: d.Str(maxAddrLen), Host: d.Str(maxAddrLen), RaftAddr: d.Str(maxAddrLen), CtlAddr: d.Str(maxAddrLen)}
		cmd = c
	case kindFinish:
		cmd = finish{}
	case kindSetVoters:
		cmd = setVoters{Voters: d.Uint32s(voterCap)}
	case kindEndWait:
		cmd = endWait{Rank: int(d.Uint(maxProcs - 1)), Since: d.Uint(^uint64(0))}
	}
	if err := d.Finish(); err != nil {
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
		encUints(e, s.Ranks.slice())}
	procs := s.Procs.sorted()
	errs = append(errs, e.EncodeArrayLen(len(procs)))
	for _, p := range procs {
		i := s.Procs.info(p)
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
	if err := wire.EncAll(errs...); err != nil {
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
	d := wire.NewDec(b, errBadSnapshot)
	n := d.ArrayLen(stateFields)
	v := d.Uint(255)
	switch {
	case d.Err() != nil:
		return state{}, d.Err()
	case v != stateVersion && v != 2:
		return state{}, fmt.Errorf("%w: version %d, this build reads versions 2 and %d", errBadSnapshot, v, stateVersion)
	case v == 2 && n != stateFieldsV2:
		return state{}, fmt.Errorf("%w: version 2 with %d fields, want %d", errBadSnapshot, n, stateFieldsV2)
	case v == stateVersion && n != stateFields:
		return state{}, fmt.Errorf("%w: %d fields, want %d", errBadSnapshot, n, stateFields)
	}
	var s state
	s.Epoch = d.Uint(^uint64(0))
	s.NumRanks = int(d.Uint(maxProcs))
	s.Ranks = newRankTable(d.Uint32s(maxProcs))
	np := d.ArrayLen(maxProcs)
	procs := make(map[uint32]procInfo, min(np, 1024))
	for i := 0; i < np && d.Err() == nil; i++ {
		if d.ArrayLen(5) != 5 && d.Err() == nil {
			d.Fail("proc entry %d: want 5 fields", i)
		}
		p := uint32(d.Uint(uint64(noProc)))
		info := procInfo{Addr: d.Str(maxAddrLen), Host: d.Str(maxAddrLen), RaftAddr: d.Str(maxAddrLen), CtlAddr: d.Str(maxAddrLen)}
		if _, dup := procs[p]; dup && d.Err() == nil {
			d.Fail("proc %d listed twice", p)
		}
		procs[p] = info
	}
	s.Procs = newProcTable(procs)
	s.Spares = d.Uint32s(maxProcs)
	nf := d.ArrayLen(maxProcs)
	s.Failed = make(map[uint32]uint64, min(nf, 1024))
	for i := 0; i < nf && d.Err() == nil; i++ {
		if d.ArrayLen(2) != 2 && d.Err() == nil {
			d.Fail("failed entry %d: want 2 fields", i)
		}
		p := uint32(d.Uint(uint64(noProc)))
		s.Failed[p] = d.Uint(^uint64(0))
	}
	s.Status = jobStatus(d.Uint(uint64(statusFailed)))
	s.StatusReason = d.Str(maxAddrLen)
	s.Shrink = d.Bool()
	s.Voters = d.Uint32s(voterCap)
	if v == stateVersion {
		s.RefillWait = time.Duration(d.Uint(math.MaxInt64))
		na := d.ArrayLen(maxProcs)
		for i := 0; i < na && d.Err() == nil; i++ {
			if d.ArrayLen(2) != 2 && d.Err() == nil {
				d.Fail("awaiting entry %d: want 2 fields", i)
			}
			s.Awaiting = append(s.Awaiting, awaiting{Rank: int(d.Uint(maxProcs - 1)), Since: d.Uint(^uint64(0))})
		}
	}
	if err := d.Finish(); err != nil {
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
