//go:build unix

package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

// spinReader reads from a socket by polling it with non-blocking reads for
// up to spin before it parks in the network poller. A goroutine woken by the
// poller costs tens of microseconds per round trip on a busy host; a
// goroutine that is already running when the bytes arrive does not.
type spinReader struct {
	nc   net.Conn
	rc   syscall.RawConn
	spin time.Duration

	// State of one non-blocking attempt, kept here so that the attempt
	// (a method value made once) allocates nothing.
	attempt func(fd uintptr) bool
	buf     []byte
	n       int
	errno   error
}

// newSocketReader returns the reader for nc's frames: nc itself, or a
// spinReader when spin > 0 and nc exposes its file descriptor.
func newSocketReader(nc net.Conn, spin time.Duration) io.Reader {
	if spin <= 0 {
		return nc
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &spinReader{nc: nc, rc: rc, spin: spin}
	s.attempt = s.readOnce
	return s
}

// readOnce is one non-blocking read; returning true keeps RawConn.Read from
// waiting in the poller.
func (s *spinReader) readOnce(fd uintptr) bool {
	s.n, s.errno = syscall.Read(int(fd), s.buf)
	return true
}

func (s *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var start time.Time
	s.buf = p
	defer func() { s.buf = nil }()
	for i := 0; ; i++ {
		err := s.rc.Read(s.attempt)
		n, errno := s.n, s.errno
		switch {
		case err != nil:
			return 0, err // closed
		case errno == nil && n == 0:
			return 0, io.EOF
		case errno == nil:
			return n, nil
		case errno == syscall.EINTR:
			continue
		case errno != syscall.EAGAIN:
			return 0, os.NewSyscallError("read", errno)
		}
		if i == 0 {
			start = time.Now()
		} else if time.Since(start) >= s.spin {
			break
		}
		// Let this process's other goroutines run, then give the CPU to
		// other processes that want it (the peer that is to answer, on an
		// oversubscribed host), as an MPI does when it polls with
		// yield_when_idle.
		runtime.Gosched()
		osYield()
	}
	return s.nc.Read(p)
}
