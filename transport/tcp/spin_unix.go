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

// rawSocket is the file descriptor under a connection whose every byte
// goes straight to the socket: a plain TCP connection, or one accepted
// here (a watchedConn, sealed by then, reads and writes through). A
// connection wrapped otherwise (TLS; a fault injector, whose faults must
// hold) has none, and the reader and writers use it as a net.Conn.
func rawSocket(nc net.Conn) syscall.RawConn {
	if wc, ok := nc.(*watchedConn); ok {
		nc = wc.Conn
	}
	sc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

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
// spinReader when spin > 0 and nc has a raw socket (rawSocket).
func newSocketReader(nc net.Conn, spin time.Duration) io.Reader {
	if spin <= 0 {
		return nc
	}
	rc := rawSocket(nc)
	if rc == nil {
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
		// Let this process's other goroutines run (the one waiting for
		// the frame, once it came). The CPU is not given to other
		// processes: polling is for hosts with a CPU per process
		// (job's choice), where a thread that gave its CPU away came
		// back tens of microseconds late.
		runtime.Gosched()
	}
	return s.nc.Read(p)
}

// socketWriter writes to a raw socket without blocking (conn.writeNow).
// Its state belongs to the holder of the connection's write token.
type socketWriter struct {
	rc      syscall.RawConn
	attempt func(fd uintptr) bool
	buf     []byte
	n       int
	errno   error
}

func newSocketWriter(nc net.Conn) *socketWriter {
	rc := rawSocket(nc)
	if rc == nil {
		return nil
	}
	w := &socketWriter{rc: rc}
	w.attempt = w.writeOnce
	return w
}

func (w *socketWriter) writeOnce(fd uintptr) bool {
	w.n, w.errno = syscall.Write(int(fd), w.buf)
	return true
}

// write writes what the socket takes of b at once and reports how much;
// a full socket is not an error (0 written).
func (w *socketWriter) write(b []byte) (int, error) {
	w.buf = b
	defer func() { w.buf = nil }()
	for {
		if err := w.rc.Write(w.attempt); err != nil {
			return 0, err // closed
		}
		switch w.errno {
		case nil:
			return w.n, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		}
		return 0, os.NewSyscallError("write", w.errno)
	}
}
