package terasort

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Summary is a record count and the order-independent checksum of those
// records: the sum, modulo 2^64, of the CRC-32 (IEEE) of each 100-byte
// record, as Hadoop's TeraValidate computes it (with a 64-bit instead of a
// 128-bit sum). A sort must preserve it exactly, so the input's summary and
// the output's must be equal.
type Summary struct {
	Records  int64
	Checksum uint64
}

// String returns the line the CLI prints last:
// "records=<n> checksum=<16 hex digits>".
func (s Summary) String() string {
	return fmt.Sprintf("records=%d checksum=%016x", s.Records, s.Checksum)
}

// Add returns the summary of the union of the records s and o describe.
func (s Summary) Add(o Summary) Summary {
	return Summary{Records: s.Records + o.Records, Checksum: s.Checksum + o.Checksum}
}

// RecordCRC returns the CRC-32 (IEEE) of one record (rec[:100]).
func RecordCRC(rec []byte) uint32 { return crc32.ChecksumIEEE(rec[:RecordSize]) }

// SumRecords returns the summary of the whole records in buf; a trailing
// partial record is ignored (callers that read files get ErrSize from the
// Reader before that can happen).
func SumRecords(buf []byte) Summary {
	n := len(buf) / RecordSize
	var sum uint64
	for off := 0; off < n*RecordSize; off += RecordSize {
		sum += uint64(crc32.ChecksumIEEE(buf[off : off+RecordSize]))
	}
	return Summary{Records: int64(n), Checksum: sum}
}

// ParseSummary parses a line in the format of Summary.String.
func ParseSummary(line string) (Summary, error) {
	var s Summary
	f := strings.Fields(line)
	if len(f) != 2 || !strings.HasPrefix(f[0], "records=") || !strings.HasPrefix(f[1], "checksum=") {
		return s, fmt.Errorf("terasort: %q is not a summary line: want records=<n> checksum=<16 hex digits>", line)
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(f[0], "records="), 10, 64)
	if err != nil || n < 0 {
		return s, fmt.Errorf("terasort: bad record count in %q", line)
	}
	c, err := ParseChecksum(strings.TrimPrefix(f[1], "checksum="))
	if err != nil {
		return s, err
	}
	return Summary{Records: n, Checksum: c}, nil
}

// ParseChecksum parses a checksum of 1 to 16 hex digits, with an optional
// 0x prefix.
func ParseChecksum(s string) (uint64, error) {
	t := s
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		t = s[2:] // one prefix: "0x0X1" is not a checksum
	}
	if t == "" || len(t) > 16 {
		return 0, fmt.Errorf("terasort: checksum %q: want 1 to 16 hex digits", s)
	}
	v, err := strconv.ParseUint(t, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("terasort: checksum %q: want 1 to 16 hex digits", s)
	}
	return v, nil
}

// Expect holds the values a run should reproduce (terasort validate
// --expect-records / --expect-checksum). Only the fields whose Check flag is
// set are compared.
type Expect struct {
	Records       int64
	CheckRecords  bool
	Checksum      uint64
	CheckChecksum bool
}

// Check returns nil if got matches every expected value that is set, and
// otherwise an error wrapping ErrMismatch that names both values.
func (e Expect) Check(got Summary) error {
	var msgs []string
	if e.CheckRecords && got.Records != e.Records {
		msgs = append(msgs, fmt.Sprintf("got %d records, expected %d", got.Records, e.Records))
	}
	if e.CheckChecksum && got.Checksum != e.Checksum {
		msgs = append(msgs, fmt.Sprintf("got checksum %016x, expected %016x", got.Checksum, e.Checksum))
	}
	if msgs == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrMismatch, strings.Join(msgs, "; "))
}
