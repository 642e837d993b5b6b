package launch

import (
	"bufio"
	"bytes"
	"io"
	"sync"
)

// maxLine caps one output line; a longer line is cut into pieces of this
// size, each printed as a line of its own with the prefix.
const maxLine = 256 << 10

// output serialises everything gaspirun prints, so that lines from
// different processes (and gaspirun's own) never interleave mid-line.
// Write errors (a closed terminal, a reader that went away) are ignored: the
// processes' output is still drained so they never block on it.
type output struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	buf    []byte
	status *liveLine // nil: no terminal, or not started
}

func newOutput(stdout, stderr io.Writer) *output {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &output{stdout: stdout, stderr: stderr}
}

// line writes "[label] text\n" to w in one Write.
func (o *output) line(w io.Writer, label string, text []byte) {
	text = bytes.TrimSuffix(text, []byte("\n"))
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.buf[:0]
	b = append(b, '[')
	b = append(b, label...)
	b = append(b, "] "...)
	b = append(b, text...)
	b = append(b, '\n')
	o.status.erase()
	w.Write(b)
	if w == o.stdout {
		o.status.progress(label, text)
	}
	o.status.draw()
	if cap(b) <= 64<<10 {
		o.buf = b
	}
}

// notice writes one of gaspirun's own lines to stderr.
func (o *output) notice(text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status.erase()
	io.WriteString(o.stderr, "gaspirun: "+text+"\n")
	o.status.draw()
}

// redraw draws the status line again (its elapsed time).
func (o *output) redraw() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status.draw()
}

// endStatus erases the status line for good.
func (o *output) endStatus() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status.close()
}

// noticeWriter is an io.Writer for a logger: each Write is written to
// stderr under the output lock (slog handlers write one record per Write).
func (o *output) noticeWriter() io.Writer { return noticeWriter{o} }

type noticeWriter struct{ o *output }

func (n noticeWriter) Write(b []byte) (int, error) {
	n.o.mu.Lock()
	defer n.o.mu.Unlock()
	n.o.status.erase()
	n.o.stderr.Write(append([]byte("gaspirun: "), b...))
	n.o.status.draw()
	return len(b), nil
}

// pump copies r to w line by line, each line prefixed with the current
// label(), until r ends. A last line without a newline gets one.
func (o *output) pump(r io.Reader, w io.Writer, label func() string) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			line = append(line, chunk...)
			if chunk[len(chunk)-1] == '\n' || len(line) >= maxLine {
				o.line(w, label(), line)
				line = line[:0]
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(line) > 0 {
				o.line(w, label(), line)
			}
			return
		}
	}
}
