package launch

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestPumpPrefixesLines(t *testing.T) {
	var out bytes.Buffer
	o := newOutput(&out, nil)
	labels := []string{"s5", "r2", "r2"}
	i := 0
	label := func() string { l := labels[min(i, len(labels)-1)]; i++; return l }
	o.pump(strings.NewReader("first\nsecond\nno newline at end"), streamStdout, 5, label, nil)
	want := "[s5] first\n[r2] second\n[r2] no newline at end\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestPumpCutsHugeLines(t *testing.T) {
	var out bytes.Buffer
	o := newOutput(&out, nil)
	long := strings.Repeat("x", maxLine+10)
	o.pump(strings.NewReader(long+"\nend\n"), streamStdout, 0, func() string { return "r0" }, nil)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "[r0] "+long[:maxLine] || lines[1] != "[r0] "+long[maxLine:] || lines[2] != "[r0] end" {
		t.Fatalf("got %d lines: lengths %d", len(lines), len(out.String()))
	}
}

// TestPumpsNeverInterleave runs several pumps and notices into one writer
// and checks that every line comes out whole.
func TestPumpsNeverInterleave(t *testing.T) {
	var out bytes.Buffer
	o := newOutput(&out, &out)
	const procs, lines = 4, 500
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		var in strings.Builder
		for i := 0; i < lines; i++ {
			fmt.Fprintf(&in, "proc %d line %d %s\n", p, i, strings.Repeat("y", 100+i%300))
		}
		label := fmt.Sprintf("r%d", p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.pump(strings.NewReader(in.String()), streamStdout, p, func() string { return label }, nil)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < lines; i++ {
			o.notice(fmt.Sprintf("notice %d", i))
		}
	}()
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != procs*lines+lines {
		t.Fatalf("%d lines, want %d", len(got), procs*lines+lines)
	}
	next := make([]int, procs)
	for _, l := range got {
		if strings.HasPrefix(l, "gaspirun: notice ") {
			continue
		}
		var p, i int
		var ys string
		if _, err := fmt.Sscanf(l, "[r%d] proc %d line %d %s", new(int), &p, &i, &ys); err != nil {
			t.Fatalf("mangled line %q: %v", l, err)
		}
		if !strings.HasPrefix(l, fmt.Sprintf("[r%d] ", p)) || i != next[p] || len(ys) != 100+i%300 {
			t.Fatalf("line %q out of order or cut (want line %d of proc %d)", l, next[p], p)
		}
		next[p]++
	}
}
