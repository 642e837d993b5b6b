package terasort

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Record layout constants (see doc.go for the full layout).
const (
	// RecordSize is the size of one record in bytes.
	RecordSize = 100
	// KeySize is the size of the sort key at the start of each record.
	KeySize = 10
)

// Key returns the 10-byte key of rec, which must hold at least KeySize
// bytes. The result aliases rec and has capacity KeySize.
func Key(rec []byte) []byte { return rec[:KeySize:KeySize] }

// CompareKeys compares the 10-byte keys at the start of a and b (records or
// keys) like bytes.Compare: -1 if a's key sorts first, 0 if equal, +1
// otherwise. Both must hold at least KeySize bytes.
func CompareKeys(a, b []byte) int {
	x, y := binary.BigEndian.Uint64(a), binary.BigEndian.Uint64(b)
	if x == y {
		x, y = uint64(binary.BigEndian.Uint16(a[8:KeySize])), uint64(binary.BigEndian.Uint16(b[8:KeySize]))
	}
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// NumRecords returns the number of whole records in buf (len(buf)/100).
func NumRecords(buf []byte) int { return len(buf) / RecordSize }

// Record returns record i of buf (bytes [100i, 100i+100)).
func Record(buf []byte, i int) []byte {
	return buf[i*RecordSize : (i+1)*RecordSize : (i+1)*RecordSize]
}

// Format selects how Generate lays out a record. Both are gensort's layouts
// (see doc.go); validation, checksums and sorting treat every record as 100
// opaque bytes with a 10-byte key and do not care which was used.
type Format int

const (
	// FormatASCII is gensort -a: printable keys, records end in "\r\n", so
	// line-oriented tools (LC_ALL=C sort) can sort the data too.
	FormatASCII Format = iota
	// FormatBinary is gensort's default: 10 random bytes of key (any byte
	// value, including '\n'), records end in 0xCC 0xDD 0xEE 0xFF.
	FormatBinary
)

var formatNames = [...]string{"ascii", "binary"}

func (f Format) String() string {
	if f >= 0 && int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ParseFormat parses "ascii" or "binary".
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if strings.EqualFold(s, n) {
			return Format(i), nil
		}
	}
	return 0, configErr("unknown record format %q: use ascii or binary", s)
}
