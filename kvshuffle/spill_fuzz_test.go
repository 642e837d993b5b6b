package kvshuffle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// spillBytes writes pairs through the shuffle's own spill writer and
// returns the file's bytes.
func spillBytes(t testing.TB, dir string, pairs ...[2]string) []byte {
	w, err := createSpill(dir, spillBuffer(nil, 64), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if err := w.write([]byte(p[0]), []byte(p[1])); err != nil {
			t.Fatal(err)
		}
	}
	sf, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(sf.path)
	b, err := os.ReadFile(sf.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzSpillFile: a spill file read back for a merge or after a roll-back
// (openSpill, then fileSource.next to the end). The recorded pair count and
// checksum are taken from the file's own trailer, as a state naming the
// file would carry them, so that the fuzzer reaches the pair framing. Every
// refusal wraps ErrCorrupt; nothing panics or reads past the data; and a
// file read to the end without error is exactly magic | the pairs in run
// framing | trailer, with the count and CRC-32C of what was read.
func FuzzSpillFile(f *testing.F) {
	seedDir := f.TempDir()
	f.Add(spillBytes(f, seedDir), uint16(0), uint16(100))
	f.Add(spillBytes(f, seedDir, [2]string{"a", "1"}, [2]string{"b", ""}, [2]string{"", "v"}), uint16(0), uint16(100))
	f.Add(spillBytes(f, seedDir, [2]string{"a longer key", "and a value past the limit"}), uint16(5), uint16(20))
	big := spillBytes(f, seedDir, [2]string{"key", "value"})
	big[spillHead] = 0x83 // the key length, no longer in shortest form
	big = append(big[:spillHead+1], append([]byte{0x00}, big[spillHead+1:]...)...)
	f.Add(big, uint16(0), uint16(100))
	f.Add([]byte(spillMagic+"\x01\x00kKVSE"), uint16(0), uint16(0))
	f.Add([]byte{}, uint16(0), uint16(0))
	dir := f.TempDir()
	path := filepath.Join(dir, "run-fuzz.kvs")
	// The writer's output reads back whole.
	for _, b := range [][]byte{spillBytes(f, seedDir), spillBytes(f, seedDir, [2]string{"a", "1"}, [2]string{"b", ""})} {
		writeFresh(f, path, b)
		if _, _, err := readSpillFile(path, b, 16, 100); err != nil {
			f.Fatalf("a spill file as written is refused: %v", err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, ioSel, pairSel uint16) {
		writeFresh(t, path, data)
		maxPair := 1 + int(pairSel)%1024
		run, n, err := readSpillFile(path, data, 16+int(ioSel)%4096, maxPair)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset < 0 || ce.Offset > int64(len(data)) {
				t.Fatalf("refusal %v is not a *CorruptError with an offset inside the file", err)
			}
			return
		}
		want := append([]byte(spillMagic), run...)
		want = binary.LittleEndian.AppendUint64(want, n)
		want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(run, castagnoli))
		want = append(want, spillTrailer...)
		if !bytes.Equal(want, data) {
			t.Fatalf("%d pairs read to the end, but they do not re-encode to the file:\n%x\n%x", n, want, data)
		}
	})
}

// readSpillFile reads the spill file at path (whose bytes are data) to the
// end, with the pair count and checksum of its trailer as the recorded ones,
// and returns the pairs in run framing. It checks what each pair must obey.
func readSpillFile(path string, data []byte, ioBuf, maxPair int) (run []byte, n uint64, err error) {
	sf := &spillFile{path: path, size: int64(len(data))}
	if len(data) >= spillHead+spillTail {
		tail := data[len(data)-spillTail:]
		sf.pairs, sf.crc = binary.LittleEndian.Uint64(tail), binary.LittleEndian.Uint32(tail[8:])
	}
	src, err := openSpill(sf, ioBuf, maxPair)
	if err != nil {
		return nil, 0, err
	}
	defer src.close()
	for {
		k, v, prefix, ok, err := src.next()
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return run, n, nil
		}
		if len(k) > maxPair || len(v) > maxPair || prefix != KeyPrefix(k) {
			return nil, 0, fmt.Errorf("pair %d: %d+%d bytes (max %d), prefix %x for key %x", n, len(k), len(v), maxPair, prefix, k)
		}
		run = AppendPair(run, k, v)
		n++
	}
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
