package proctest

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestScanLines(t *testing.T) {
	var got []string
	ScanLines(strings.NewReader("a\nb c\n\nlast"), func(l string) { got = append(got, l) })
	if want := []string{"a", "b c", "", "last"}; !slices.Equal(got, want) {
		t.Fatalf("lines %q, want %q", got, want)
	}
	// A line over 1 MiB ends the scan, and the rest is drained: the
	// writer of a pipe does not block.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first\n" + strings.Repeat("x", 2<<20) + "\nafter\n"))
		pw.Close()
	}()
	got = nil
	ScanLines(pr, func(l string) { got = append(got, l) })
	if !slices.Equal(got, []string{"first"}) {
		t.Fatalf("lines before an over-long one: %q, want [first]", got)
	}
}
