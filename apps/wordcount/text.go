package wordcount

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Words calls f with each word of line: a maximal run of letters and
// digits, lowercased. The slice is valid only during the call.
func Words(line []byte, buf []byte, f func(word []byte) error) error {
	for len(line) > 0 {
		r, n := utf8.DecodeRune(line)
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			line = line[n:]
			continue
		}
		buf = buf[:0]
		for len(line) > 0 {
			r, n = utf8.DecodeRune(line)
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				break
			}
			buf = utf8.AppendRune(buf, unicode.ToLower(r))
			line = line[n:]
		}
		if err := f(buf); err != nil {
			return err
		}
	}
	return nil
}

// Lines splits text at '\n'; a last line without one counts, an empty
// text has no lines.
func Lines(text []byte) [][]byte {
	if len(text) == 0 {
		return nil
	}
	lines := bytes.Split(text, []byte{'\n'})
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Vocabulary is the number of pseudo-words Generate draws from.
const Vocabulary = 20000

// Generate returns line i of the generated text of seed: 4 to 15 words
// drawn from Vocabulary pseudo-words with a Zipf law (s = 1.1), so a few
// words are very frequent and most are rare.
func Generate(seed uint64, i int64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	z := rand.NewZipf(r, 1.1, 1, Vocabulary-1)
	n := 4 + r.IntN(12)
	var b []byte
	for w := range n {
		if w > 0 {
			b = append(b, ' ')
		}
		b = appendPseudoWord(b, z.Uint64())
		if r.IntN(10) == 0 {
			b = append(b, ",.;!?"[r.IntN(5)])
		}
	}
	return b
}

// appendPseudoWord spells k in syllables: distinct k, distinct words.
func appendPseudoWord(b []byte, k uint64) []byte {
	const cons, vows = "bcdfghjklmnprstvz", "aeiou"
	for {
		b = append(b, cons[k%17], vows[(k/17)%5])
		k /= 85
		if k == 0 {
			return b
		}
	}
}

// Result is a word count summary; see the package doc.
type Result struct {
	Words  uint64 // distinct words
	Total  uint64 // words
	Digest uint64
}

func (r Result) String() string {
	return fmt.Sprintf("words=%d total=%d digest=%016x", r.Words, r.Total, r.Digest)
}

// Add adds word's count to r.
func (r *Result) Add(word []byte, count uint64) {
	h := fnv.New64a()
	h.Write(word)
	h.Write([]byte{'\t'})
	h.Write(strconv.AppendUint(nil, count, 10))
	r.Words++
	r.Total += count
	r.Digest += h.Sum64()
}

// Merge adds o's words to r (the words of both are disjoint).
func (r Result) Merge(o Result) Result {
	return Result{Words: r.Words + o.Words, Total: r.Total + o.Total, Digest: r.Digest + o.Digest}
}

// Reference counts the words of lines in one process.
func Reference(n int64, line func(i int64) []byte) Result {
	counts := map[string]uint64{}
	var buf []byte
	for i := range n {
		Words(line(i), buf, func(w []byte) error {
			counts[string(w)]++
			return nil
		})
	}
	var r Result
	for w, c := range counts {
		r.Add([]byte(w), c)
	}
	return r
}
