package wordcount

import (
	"slices"
	"testing"
)

func words(line string) []string {
	var out []string
	Words([]byte(line), nil, func(w []byte) error {
		out = append(out, string(w))
		return nil
	})
	return out
}

func TestWords(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{"Hello, world! hello", []string{"hello", "world", "hello"}},
		{"  naïve café,Café 42x ", []string{"naïve", "café", "café", "42x"}},
		{"--- ...", nil},
		{"", nil},
	} {
		if got := words(c.line); !slices.Equal(got, c.want) {
			t.Errorf("Words(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}

func TestLines(t *testing.T) {
	for _, c := range []struct {
		text string
		want int
	}{{"", 0}, {"a", 1}, {"a\n", 1}, {"a\n\nb", 3}, {"\n", 1}} {
		if got := len(Lines([]byte(c.text))); got != c.want {
			t.Errorf("Lines(%q) has %d lines, want %d", c.text, got, c.want)
		}
	}
}

// The reference counts a text whose answer is known, and the digest does
// not depend on the order words are added in.
func TestReference(t *testing.T) {
	text := [][]byte{[]byte("Hello, world! hello"), []byte("the World")}
	got := Reference(2, func(i int64) []byte { return text[i] })
	var want Result
	for _, wc := range []struct {
		w string
		c uint64
	}{{"the", 1}, {"world", 2}, {"hello", 2}} {
		want.Add([]byte(wc.w), wc.c)
	}
	if got != want || got.Words != 3 || got.Total != 5 {
		t.Fatalf("Reference = %v, want %v", got, want)
	}
	if a, b := Generate(7, 12), Generate(7, 12); string(a) != string(b) || string(a) == string(Generate(8, 12)) {
		t.Fatalf("Generate is not a function of (seed, line): %q %q", a, b)
	}
}
