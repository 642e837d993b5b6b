package launch

import (
	"bufio"
	"bytes"
	"io"
	"sync"
	"time"
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

	// col collapses identical lines of several processes (nil: every line
	// is printed at once); timer prints its groups when they fall due.
	col     *collapser
	timer   *time.Timer
	timerAt time.Time
	// colReady, until it returns true, keeps the processes' standard
	// output out of the collapsing (their diagnostics on stderr are
	// collapsed from the start); nil once it returned true.
	colReady func() bool

	// The last line a process printed, and when (stallCheck).
	lastAt   time.Time
	lastText string
}

// lastLineMax caps the last line as a stall note quotes it.
const lastLineMax = 120

// lastLine is the last line a process printed ("[label] text", cut to
// lastLineMax bytes) and when; zero before the first.
func (o *output) lastLine() (time.Time, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastAt, o.lastText
}

// maxPendingOutput bounds the output the collapser holds back.
const maxPendingOutput = 4 << 20

// collapse turns on the collapsing of identical lines printed by several of
// nprocs processes within window (see collapser); window <= 0 leaves it
// off. Lines on stderr (diagnostics: the same usage error from every
// rank) are collapsed at once; lines on stdout only from the first line
// that comes once ready returns true (nil: at once), and are printed as
// they come until then, so that the output of a program that never joins
// a job (gaspirun -n 2 -- hostname) stays one line per process, as
// under mpirun. Run passes "the job formed": a process prints a line
// after it got the member table, which the rendezvous sends only once it
// is complete.
func (o *output) collapse(window time.Duration, nprocs int, ready func() bool) {
	if window <= 0 || nprocs <= 1 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.col, o.colReady = newCollapser(window, nprocs, maxPendingOutput), ready
}

// addProc counts a process started after the job (a replacement) among
// those whose lines collapse.
func (o *output) addProc() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.col != nil {
		o.col.addProc()
	}
}

// flush prints every line the collapser holds and stops collapsing: lines
// that come later are printed at once.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.flushLocked()
	o.col, o.colReady = nil, nil
	if o.timer != nil {
		o.timer.Stop()
	}
}

func (o *output) flushLocked() {
	if o.col != nil {
		o.writeLines(o.col.flushAll(nil))
	}
}

// tick prints the groups that fell due and arms the timer for the next.
func (o *output) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.col == nil {
		return
	}
	o.timerAt = time.Time{}
	o.writeLines(o.col.expire(time.Now(), nil))
	o.arm()
}

// arm sets the timer to the collapser's next due time; o.mu is held.
func (o *output) arm() {
	at, ok := o.col.next()
	if !ok || at.Equal(o.timerAt) {
		return
	}
	o.timerAt = at
	d := time.Until(at)
	if o.timer == nil {
		o.timer = time.AfterFunc(d, o.tick)
		return
	}
	o.timer.Reset(d)
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

// line prints a line that process proc (labelled label) wrote on
// stream: at once, or through the collapser.
func (o *output) line(stream, proc int, label string, text []byte) {
	text = bytes.TrimSuffix(text, []byte("\n"))
	o.mu.Lock()
	defer o.mu.Unlock()
	if stream != streamEvent {
		o.lastAt = time.Now()
		o.lastText = "[" + label + "] " + string(text[:min(len(text), lastLineMax)])
	}
	if o.colReady != nil && o.colReady() {
		o.colReady = nil
	}
	if o.col == nil || (o.colReady != nil && stream == streamStdout) {
		o.write(stream, label, text)
		return
	}
	o.writeLines(o.col.add(time.Now(), proc, label, stream, string(text)))
	o.arm()
}

func (o *output) writeLines(ls []collapsedLine) {
	for _, l := range ls {
		o.write(l.stream, l.labels, []byte(l.text))
	}
}

// event prints a process's event report as one of gaspirun's lines,
// "gaspirun: [r3] restored checkpoint 14", through the collapser like the
// processes' lines: the same event from every rank is one line.
func (o *output) event(proc int, label, text string) {
	o.line(streamEvent, proc, label, []byte(text))
}

// write writes "[label] text\n" to the stream in one Write; o.mu is held.
func (o *output) write(stream int, label string, text []byte) {
	w := o.stdout
	if stream != streamStdout {
		w = o.stderr
	}
	b := o.buf[:0]
	if stream == streamEvent {
		b = append(b, "gaspirun: "...)
	}
	b = append(b, '[')
	b = append(b, label...)
	b = append(b, "] "...)
	b = append(b, text...)
	b = append(b, '\n')
	o.status.erase()
	w.Write(b)
	if stream == streamStdout {
		o.status.progress(label, text)
	}
	o.status.draw()
	if cap(b) <= 64<<10 {
		o.buf = b
	}
}

// alert is notice for an important line (a failure, a death): it first
// prints the lines the collapser holds, so that the processes' last words
// come before gaspirun's verdict on them.
func (o *output) alert(text string) {
	o.mu.Lock()
	o.flushLocked()
	o.mu.Unlock()
	o.notice(text)
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

// pump copies r, process proc's stream, line by line, each line prefixed
// with the current label(), until r ends. A last line without a newline
// gets one.
func (o *output) pump(r io.Reader, stream, proc int, label func() string, file io.Writer) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if file != nil {
				file.Write(chunk) // --output-filename: the bytes as written, no prefix
			}
			line = append(line, chunk...)
			if chunk[len(chunk)-1] == '\n' || len(line) >= maxLine {
				o.line(stream, proc, label(), line)
				line = line[:0]
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(line) > 0 {
				o.line(stream, proc, label(), line)
			}
			return
		}
	}
}
