package proctest

import (
	"bufio"
	"io"
)

// ScanLines calls f with each line read from r (a process's output), up to
// 1 MiB a line, until r ends; then it drains whatever is left (after a
// longer line) so that the writer never blocks on a full pipe.
func ScanLines(r io.Reader, f func(line string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
	io.Copy(io.Discard, r)
}
