package proctest

import (
	"strconv"
	"strings"
)

// ParseKV reads the key=value pairs of a log line written by slog's text
// handler (values possibly quoted) into kv. Words that are not pairs are
// skipped, and the first occurrence of a key wins.
func ParseKV(s string, kv map[string]string) {
	for s != "" {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return
		}
		key := s[:eq]
		if strings.ContainsRune(key, ' ') {
			_, s, _ = strings.Cut(s, " ") // not a pair: skip the word
			continue
		}
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			end := closingQuote(s)
			val, s = s[:end], s[end:]
			if u, err := strconv.Unquote(val); err == nil {
				val = u
			}
		} else {
			val, s, _ = strings.Cut(s, " ")
		}
		if _, dup := kv[key]; !dup {
			kv[key] = val
		}
	}
}

// closingQuote returns the index just past the quote that closes the
// quoted string s starts with, or len(s).
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(s)
}
