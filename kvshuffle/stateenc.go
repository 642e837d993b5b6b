package kvshuffle

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// state is the decoded form of a checkpoint state.
//
// Encoding (little-endian):
//
//	0   magic "KVSSTATE"
//	8   version uint32 (1)
//	12  rank, size, nSrc, nParts, flags uint32 (flags: 1 = O task, 2 = A task)
//	32  checkpoint uint64, consumed uint64
//	48  closed uint8 (the O task had called CloseSend)
//	49  ended: nSrc bytes on an A task (1 = that O task's stream had ended), none otherwise
//	    files uint32, then per file: path length uint32, path, size uint64, pairs uint64, crc uint32
//	    runs uint32, then per run: sorted uint8, length uint64, framed pairs
//	end CRC-32C of everything before, uint32
type state struct {
	c                               uint64
	rank, size, nSrc, nParts, flags uint32
	consumed                        uint64
	closed                          bool   // the O task had called CloseSend
	ended                           []bool // per O task: its stream had ended (A task)
	files                           []stateFile
	runs                            []stateRun
}

type stateFile struct {
	path  string
	size  int64
	pairs uint64
	crc   uint32
}

type stateRun struct {
	sorted bool
	data   []byte
	pairs  int64
}

const (
	stateMagic   = "KVSSTATE"
	stateVersion = 1
	maxPathLen   = 4096
)

func (s *Shuffle) newState(c uint64) *state {
	st := &state{c: c, rank: uint32(s.rank), size: uint32(s.rt.Size()), nSrc: uint32(len(s.oRanks)), nParts: uint32(len(s.aRanks))}
	if s.o != nil {
		st.flags |= 1
	}
	if s.a != nil {
		st.flags |= 2
		st.ended = make([]bool, len(s.oRanks))
	}
	return st
}

// encode serialises st, with the unsorted pieces appended as one unsorted
// run.
func (st *state) encode(unsorted [][]byte) []byte {
	size := 64 + len(st.ended)
	for _, f := range st.files {
		size += 24 + len(f.path)
	}
	for _, r := range st.runs {
		size += 9 + len(r.data)
	}
	for _, u := range unsorted {
		size += len(u)
	}
	b := make([]byte, 0, size+16)
	b = append(b, stateMagic...)
	b = binary.LittleEndian.AppendUint32(b, stateVersion)
	for _, v := range []uint32{st.rank, st.size, st.nSrc, st.nParts, st.flags} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, st.c)
	b = binary.LittleEndian.AppendUint64(b, st.consumed)
	b = append(b, boolByte(st.closed))
	for _, e := range st.ended {
		b = append(b, boolByte(e))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(st.files)))
	for _, f := range st.files {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.path)))
		b = append(b, f.path...)
		b = binary.LittleEndian.AppendUint64(b, uint64(f.size))
		b = binary.LittleEndian.AppendUint64(b, f.pairs)
		b = binary.LittleEndian.AppendUint32(b, f.crc)
	}
	n := len(st.runs)
	if len(unsorted) > 0 {
		n++
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, r := range st.runs {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(r.data)))
		b = append(b, r.data...)
	}
	if len(unsorted) > 0 {
		total := 0
		for _, u := range unsorted {
			total += len(u)
		}
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint64(b, uint64(total))
		for _, u := range unsorted {
			b = append(b, u...)
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// stateReader decodes with bounds checks; the first problem sticks.
type stateReader struct {
	b   []byte
	off int
	err error
}

func (r *stateReader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = corrupt("state", int64(r.off), "%s of %d bytes, %d left", what, n, len(r.b)-r.off)
		return nil
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *stateReader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *stateReader) flag(what string) bool {
	b := r.take(1, what)
	if b == nil {
		return false
	}
	if b[0] > 1 {
		r.err = corrupt("state", int64(r.off-1), "%s flag is %d", what, b[0])
	}
	return b[0] == 1
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (r *stateReader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// decodeState checks a checkpoint state (as Checkpoint returns it) and
// decodes it; the runs alias b.
func decodeState(b []byte) (*state, error) {
	if len(b) < len(stateMagic)+4+4 {
		return nil, corrupt("state", 0, "%d bytes, too short for a state", len(b))
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, corrupt("state", int64(len(body)), "checksum %08x, state says %08x", got, want)
	}
	r := &stateReader{b: body}
	if string(r.take(8, "magic")) != stateMagic {
		return nil, corrupt("state", 0, "bad magic")
	}
	if v := r.u32("version"); v != stateVersion {
		return nil, corrupt("state", 8, "version %d, this build reads %d", v, stateVersion)
	}
	st := &state{}
	st.rank, st.size, st.nSrc, st.nParts, st.flags = r.u32("rank"), r.u32("size"), r.u32("O tasks"), r.u32("A tasks"), r.u32("flags")
	st.c, st.consumed = r.u64("checkpoint"), r.u64("consumed")
	if st.flags == 0 || st.flags > 3 {
		return nil, corrupt("state", 28, "roles %d", st.flags)
	}
	st.closed = r.flag("closed")
	if st.flags&2 != 0 {
		if st.nSrc > uint32(len(body)) {
			return nil, corrupt("state", 20, "%d O tasks, more than the state's bytes", st.nSrc)
		}
		st.ended = make([]bool, st.nSrc)
		for i := range st.ended {
			st.ended[i] = r.flag("ended")
		}
	}
	nf := r.u32("file count")
	for i := uint32(0); i < nf && r.err == nil; i++ {
		pl := r.u32("path length")
		if pl == 0 || pl > maxPathLen {
			return nil, corrupt("state", int64(r.off), "spill file path of %d bytes", pl)
		}
		f := stateFile{path: string(r.take(uint64(pl), "path"))}
		f.size, f.pairs, f.crc = int64(r.u64("file size")), r.u64("file pairs"), r.u32("file checksum")
		if f.size < spillHead+spillTail {
			return nil, corrupt("state", int64(r.off), "spill file of %d bytes", f.size)
		}
		st.files = append(st.files, f)
	}
	nr := r.u32("run count")
	for i := uint32(0); i < nr && r.err == nil; i++ {
		kind := r.take(1, "run kind")
		n := r.u64("run length")
		data := r.take(n, "run")
		if r.err != nil {
			break
		}
		if kind[0] > 1 {
			return nil, corrupt("state", int64(r.off), "run kind %d", kind[0])
		}
		pairs, err := DecodeRun(data, nil)
		if err != nil {
			return nil, fmt.Errorf("run %d of the state: %w", i, err)
		}
		st.runs = append(st.runs, stateRun{sorted: kind[0] == 1, data: data, pairs: int64(pairs)})
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(body) {
		return nil, corrupt("state", int64(r.off), "%d bytes after the last run", len(body)-r.off)
	}
	return st, nil
}
