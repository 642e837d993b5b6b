package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// trailerFor is an independent rendering of the rank-file trailer (see
// disk.go) for a given chunk size: the writer's encodeTrailer reads the
// package-level diskChunk, which a fuzz target must not change.
func trailerFor(payload []byte, chunk int) []byte {
	nch := (len(payload) + chunk - 1) / chunk
	var t []byte
	for i := 0; i < nch; i++ {
		t = binary.LittleEndian.AppendUint32(t, crc32c(payload[i*chunk:min((i+1)*chunk, len(payload))]))
	}
	sum := crc32c(t)
	t = binary.LittleEndian.AppendUint32(t, uint32(nch))
	t = binary.LittleEndian.AppendUint32(t, uint32(chunk))
	t = binary.LittleEndian.AppendUint32(t, sum)
	return append(t, trailerMagic[:]...)
}

// snapFile builds a well-formed rank file for rank 1 of 3 whose payload is
// split into n regions.
func snapFile(t testing.TB, payload []byte, n, chunk int) (Header, []byte) {
	if n == 0 {
		payload = nil
	}
	lens := make([]uint64, n)
	for i := range lens {
		lens[i] = uint64(len(payload) / n)
	}
	if n > 0 {
		lens[n-1] += uint64(len(payload) % n)
	}
	h := Header{ID: 5, Gen: 2, Epoch: 9, Rank: 1, NumRanks: 3, PayloadCRC: crc32c(payload), LayoutCRC: 7, Regions: lens}
	file := append(encodeHeader(t, h), payload...)
	return h, append(file, trailerFor(payload, chunk)...)
}

// FuzzReadSnapFile: a rank file of the disk level, built well-formed from
// the fuzzer's payload (a pattern repeated to a length, so that inputs stay
// small while files span several chunks), region count and chunk size,
// and then damaged by the fuzzer's byte flips and truncation or extension.
// The manifest entry either describes the intact file (damage after the
// write) or the damaged one (damage before the write was reported; the
// file's own checks must then catch it). readSnapFile must accept the
// intact file and return its header and payload; refuse every file the
// manifest does not describe with a *FileError wrapping ErrCorrupt whose
// offset lies in the file; and whatever it accepts must re-encode to
// exactly the bytes on disk.
func FuzzReadSnapFile(f *testing.F) {
	const maxPayload = 16 << 10
	f.Add([]byte("hello, checkpoint"), uint16(17), uint8(1), uint16(0), []byte{}, int16(0))
	f.Add([]byte{7, 1, 9}, uint16(4500), uint8(3), uint16(0), []byte{}, int16(0))        // 5 chunks of 1 KiB
	f.Add([]byte{3}, uint16(5000), uint8(2), uint16(2000), []byte{}, int16(0))           // chunks of 3 KiB
	f.Add([]byte{}, uint16(0), uint8(0), uint16(0), []byte{}, int16(0))                  // no regions
	f.Add([]byte{1}, uint16(3000), uint8(4), uint16(0), []byte{0, 70, 0, 1}, int16(0))   // payload byte flipped
	f.Add([]byte{1}, uint16(3000), uint8(4), uint16(0), []byte{1, 70, 0, 1}, int16(0))   // same, manifest follows
	f.Add([]byte{1}, uint16(3000), uint8(1), uint16(0), []byte{1, 9, 0, 0x80}, int16(0)) // header length
	f.Add([]byte{1}, uint16(3000), uint8(1), uint16(0), []byte{1}, int16(-4))            // trailer magic cut
	f.Add([]byte{1}, uint16(3000), uint8(1), uint16(0), []byte{1}, int16(5))             // trailing bytes
	dir := f.TempDir()
	path := filepath.Join(dir, rankFileName(1))
	buf := make([]byte, headerArea+maxPayload)
	f.Fuzz(func(t *testing.T, pattern []byte, size uint16, nreg uint8, chunkSel uint16, edits []byte, cut int16) {
		payload := make([]byte, int(size)%(maxPayload+1))
		for i := 0; len(pattern) > 0 && i < len(payload); i += len(pattern) {
			copy(payload[i:], pattern)
		}
		chunk := minChunk + int(chunkSel)%(3*minChunk)
		h, file := snapFile(t, payload, int(nreg%5), chunk)
		damaged := bytes.Clone(file)
		for i := 1; i+2 < len(edits); i += 3 {
			damaged[int(binary.LittleEndian.Uint16(edits[i:]))%len(damaged)] ^= edits[i+2]
		}
		switch {
		case cut < 0:
			damaged = damaged[:len(damaged)-min(int(-int32(cut)), len(damaged))]
		case cut > 0:
			damaged = append(damaged, bytes.Repeat([]byte{byte(cut)}, int(cut)%512)...)
		}
		mf := manifestFile{Rank: 1, Name: rankFileName(1), Size: int64(len(file)), CRC32C: crc32c(file)}
		follow := len(edits) > 0 && edits[0]&1 == 1
		if follow {
			mf.Size, mf.CRC32C = int64(len(damaged)), crc32c(damaged)
		}
		changed := !bytes.Equal(damaged, file)
		writeFresh(t, path, damaged)
		got, err := readSnapFile(path, mf, buf, maxPayload)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refusal %v is not a *FileError wrapping ErrCorrupt", err)
			}
			if fe.Path != path || fe.Offset < 0 || fe.Offset > int64(len(damaged)) {
				t.Fatalf("refusal names %s offset %d; the file is %s, %d bytes", fe.Path, fe.Offset, path, len(damaged))
			}
			if !changed {
				t.Fatalf("intact file refused: %v", err)
			}
			return
		}
		if changed && !follow {
			t.Fatalf("a file differing from what the manifest describes was accepted")
		}
		if !changed && !reflect.DeepEqual(got, h) {
			t.Fatalf("intact file read as %+v, written as %+v", got, h)
		}
		// Whatever is accepted is exactly header | payload | trailer.
		hb := encodeHeader(t, got)
		hl, pl := len(hb), int(got.PayloadLen())
		if len(damaged) < hl+pl+trailerFooter || !bytes.Equal(hb, damaged[:hl]) {
			t.Fatalf("accepted header %+v does not re-encode to the file's first bytes", got)
		}
		body := buf[headerArea : headerArea+pl]
		if !bytes.Equal(body, damaged[hl:hl+pl]) || crc32c(body) != got.PayloadCRC {
			t.Fatalf("payload in the buffer differs from the file's or from the header's CRC")
		}
		c := int(binary.LittleEndian.Uint32(damaged[len(damaged)-12:]))
		if !bytes.Equal(trailerFor(body, c), damaged[hl+pl:]) {
			t.Fatalf("accepted trailer does not re-encode for chunk size %d", c)
		}
	})
}

// FuzzReadManifest: a manifest.json from disk is either refused with a
// *FileError wrapping ErrCorrupt that names it, or is a manifest for the
// directory's checkpoint with one well-named, non-negative-size entry per
// rank, which survives a marshal and a second read unchanged.
func FuzzReadManifest(f *testing.F) {
	good := manifest{Format: manifestFormat, Version: 1, ID: 3, Gen: 2, Ranks: 2, Written: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Files: []manifestFile{{Rank: 0, Name: "rank-0.snap", Size: 100, CRC32C: 1}, {Rank: 1, Name: "rank-1.snap", Size: 0, CRC32C: 2}}}
	b, err := json.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, uint8(3))
	f.Add(b, uint8(4)) // another checkpoint's manifest
	f.Add(append(bytes.Clone(b), "\n{}"...), uint8(3))
	f.Add(bytes.Replace(b, []byte(`"gen"`), []byte(`"extra":1,"gen"`), 1), uint8(3))
	f.Add(bytes.Replace(b, []byte(`rank-1`), []byte(`../x-1`), 1), uint8(3))
	f.Add([]byte(`{"format":"gaspigo-ckpt","version":1,"id":0,"ranks":1,"files":[{"rank":0,"name":"rank-0.snap","size":-1}]}`), uint8(0))
	f.Add([]byte(`{"written":"10000-01-01T00:00:00Z"}`), uint8(0))
	f.Add([]byte{}, uint8(0))
	cdir := f.TempDir()
	path := filepath.Join(cdir, manifestName)
	f.Fuzz(func(t *testing.T, data []byte, idSel uint8) {
		id := uint64(idSel % 8)
		writeFresh(t, path, data)
		m, err := readManifest(cdir, id)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) || fe.Path != path {
				t.Fatalf("refusal %v is not a *FileError for %s wrapping ErrCorrupt", err, path)
			}
			return
		}
		if m.Format != manifestFormat || m.Version != 1 || m.ID != id || m.Ranks < 1 || len(m.Files) != m.Ranks {
			t.Fatalf("accepted %+v for checkpoint %d", m, id)
		}
		for i, mf := range m.Files {
			if mf.Rank != i || mf.Name != rankFileName(i) || mf.Size < 0 {
				t.Fatalf("accepted entry %d: %+v", i, mf)
			}
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("accepted manifest does not marshal: %v", err)
		}
		writeFresh(t, path, again)
		m2, err := readManifest(cdir, id)
		if err != nil {
			t.Fatalf("re-marshalled manifest refused: %v", err)
		}
		if !m2.Written.Equal(m.Written) {
			t.Fatalf("written time %v came back as %v", m.Written, m2.Written)
		}
		m2.Written = m.Written
		if !reflect.DeepEqual(m2, m) {
			t.Fatalf("manifest %+v came back as %+v", m, m2)
		}
	})
}

// writeFresh writes data to a new file at path, removing the old one
// first: rewriting a file in place through truncation makes some file
// systems (ext4's auto_da_alloc) flush it on close, which would cut a fuzz
// target to a few hundred runs a second and stall its minimisation.
func writeFresh(tb testing.TB, path string, data []byte) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
