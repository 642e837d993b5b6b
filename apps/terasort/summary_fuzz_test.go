package terasort

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseSummary: a summary line as another run printed it (terasort sum,
// validate, sort) and a user pastes it back. What parses prints back as a
// line that parses to the same summary, with a non-negative record count;
// what does not parse is an error, never a panic.
func FuzzParseSummary(f *testing.F) {
	for _, s := range []string{
		Summary{Records: 1000, Checksum: 0x1f2e3d4c5b6a7988}.String(),
		Summary{}.String(),
		"records=5 checksum=0xAB",
		"  records=5\tchecksum=ab  ",
		"records=-1 checksum=00",
		"records=1 checksum=12345678901234567",
		"records=1 checksum=0x",
		"records=1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		s, err := ParseSummary(line)
		if err != nil {
			return
		}
		if s.Records < 0 {
			t.Fatalf("%q parsed to a negative record count %d", line, s.Records)
		}
		back, err := ParseSummary(s.String())
		if err != nil || back != s {
			t.Fatalf("%q parsed to %+v, which prints as %q and parses to %+v, %v", line, s, s.String(), back, err)
		}
	})
}

// FuzzParseChecksum: an expected checksum from the command line
// (--expect-checksum). What parses is 1 to 16 hex digits after an optional
// 0x, and its value is what the digits say.
func FuzzParseChecksum(f *testing.F) {
	for _, s := range []string{"0", "0x1f2e3d4c5b6a7988", "0XFF", "ffffffffffffffff", "1ffffffffffffffff", "0x", "0x0X1", "-1", "+1", "1_0", " 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseChecksum(s)
		if err != nil {
			return
		}
		digits := s
		if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
			digits = s[2:]
		}
		if len(digits) < 1 || len(digits) > 16 || strings.Trim(digits, "0123456789abcdefABCDEF") != "" {
			t.Fatalf("accepted %q, which is not 1 to 16 hex digits after an optional 0x", s)
		}
		if w, err := strconv.ParseUint(digits, 16, 64); err != nil || w != v {
			t.Fatalf("%q parsed to %#x, its digits say %#x (%v)", s, v, w, err)
		}
	})
}
