package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads a byte count: a number with an optional unit B, K (KiB,
// KB), M (MiB, MB) or G (GiB, GB), all powers of 1024, case-insensitive.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
		{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
	} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q: want a byte count such as 8, 64K or 4MiB", s)
	}
	return n * mult, nil
}

// ParseSizes reads a comma-separated list of sizes. An item A..B stands for
// A, 2A, 4A, ... up to B. An empty string is an empty list.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(item, "..")
		a, err := ParseSize(lo)
		if err != nil {
			return nil, err
		}
		if !isRange {
			out = append(out, a)
			continue
		}
		b, err := ParseSize(hi)
		if err != nil {
			return nil, err
		}
		if a < 1 || b < a {
			return nil, fmt.Errorf("range %q: want A..B with 1 <= A <= B, e.g. 8..4M", item)
		}
		for v := a; v <= b; v *= 2 {
			out = append(out, v)
		}
	}
	return out, nil
}

// FormatSize prints a byte count in the largest binary unit that divides
// it: "8 B", "1 KiB", "4 MiB".
func FormatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
