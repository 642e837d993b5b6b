package points

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

func TestCentroidsRoundTripAndChecksum(t *testing.T) {
	t.Parallel()
	const k, d = 4, 3
	c := append(append([]float64(nil), awkward[:9]...), 1.5, -7, 1e100)
	var b bytes.Buffer
	if err := WriteCentroidsCSV(&b, c, k, d); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != k {
		t.Fatalf("%d lines, want %d", lines, k)
	}
	path := writeTemp(t, "c.csv", b.Bytes())
	got, err := ReadCentroidsCSV(path, k, d)
	if err != nil {
		t.Fatal(err)
	}
	if kmtest.SameBits(got, c) != -1 {
		t.Fatalf("round trip changed the bits: %v vs %v", got, c)
	}
	if kernel.Checksum(got) != kernel.Checksum(c) {
		t.Fatal("checksum differs after an exact round trip")
	}
	// The checksum sees every bit: -0 vs +0 and one ulp.
	z := append([]float64(nil), c...)
	z[1] = 0 // was -0
	if kernel.Checksum(z) == kernel.Checksum(c) {
		t.Fatal("checksum ignores the sign of zero")
	}
	z = append([]float64(nil), c...)
	z[0] = math.Nextafter(z[0], 1)
	if kernel.Checksum(z) == kernel.Checksum(c) {
		t.Fatal("checksum ignores one ulp")
	}
	// Known layout: SHA-256 of the 8 little-endian bytes of 1.0.
	if got, want := kernel.Checksum([]float64{1}), sha256Hex([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}); got != want {
		t.Fatalf("kernel.Checksum([1]) = %s, want %s", got, want)
	}
	if err := WriteCentroidsCSV(&b, c[:5], k, d); !errors.Is(err, kernel.ErrShape) {
		t.Fatalf("short centroids: %v", err)
	}
}

func TestReadCentroidsErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		err       error
		want      []string
	}{
		{"too few", "1,2\n3,4\n", kernel.ErrCount, []string{"holds 2 centroids, want k = 3"}},
		{"too many", "1,2\n3,4\n5,6\n\n7,8\n", kernel.ErrCount, []string{":5:", "more than k = 3"}},
		{"wrong d", "1,2\n3,4,5\n5,6\n", ErrColumns, []string{":2:", "got 3 values, want 2"}},
		{"nan", "1,2\n3,nan\n5,6\n", kernel.ErrNotFinite, []string{":2:", "column 2"}},
		{"word", "1,2\n3,4\nfive,6\n", ErrSyntax, []string{":3:", `"five"`}},
	}
	for _, tc := range cases {
		path := writeTemp(t, "c.csv", []byte(tc.src))
		_, err := ReadCentroidsCSV(path, 3, 2)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: message %q lacks %q or the path", tc.name, err, w)
			}
		}
	}
	if _, err := ReadCentroidsCSV("x", 0, 2); !errors.Is(err, kernel.ErrShape) {
		t.Errorf("k = 0: %v", err)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
