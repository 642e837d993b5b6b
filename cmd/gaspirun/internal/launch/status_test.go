package launch

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Rule: with a status line, every line printed first erases it and then
// draws it again, so the line never mixes with output; it shows the
// lowest rank's last line, the epoch and the spares; closing erases it.
// Without a terminal (a buffer) there is no status line at all.
func TestLiveLine(t *testing.T) {
	if s := newLiveLine(&bytes.Buffer{}, 4, 1); s != nil {
		t.Fatal("a status line on a writer that is no terminal")
	}
	var term bytes.Buffer
	o := newOutput(&term, &term)
	o.status = &liveLine{w: &term, width: 60, start: time.Now(), ranks: 4, spares: 1, epoch: 1, lastRank: -1}
	o.line(o.stdout, "r1", []byte("iter 3\n"))
	o.line(o.stdout, "r0", []byte("iter 4\n"))
	o.status.setState(2, 0)
	o.notice("spare process 4 now holds rank 2 (epoch 2)")
	got := term.String()
	for _, want := range []string{
		"[r1] iter 3\n\r\x1b[K\x1b[7m[4 ranks, epoch 1, 1 spares left",
		"\r\x1b[K[r0] iter 4\n",
		"r0: iter 4\x1b[0m",
		"\r\x1b[Kgaspirun: spare process 4 now holds rank 2 (epoch 2)\n\r\x1b[K\x1b[7m[4 ranks, epoch 2, 0 spares left",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, got)
		}
	}
	term.Reset()
	o.endStatus()
	o.notice("done")
	if got := term.String(); got != "\r\x1b[Kgaspirun: done\n" {
		t.Errorf("after the end: %q", got)
	}
}
