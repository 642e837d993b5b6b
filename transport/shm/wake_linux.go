package shm

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Wake-ups without the Go scheduler's system-call path.
//
// A wake-up is one byte on a ring's connection. Reading and writing it
// through net.Conn enters the Go scheduler's system-call path, and the
// first such call of a process that was idle wakes the runtime's monitor
// thread, which then polls every 20 µs to 10 ms for as long as the
// process runs. With hundreds of processes on a few cores, each woken
// by a ring's byte for every message of a collective, those polls took a
// quarter of the machine (perf, 256 processes on 2 cores). The sockets
// are non-blocking, so a raw read or write never blocks: wakeConn reads
// and writes them with raw system calls, and waits for a byte in the
// network poller like net.Conn does (deadlines included).

// wakeConn is a ring connection's raw access.
type wakeConn struct{ rc syscall.RawConn }

func newWakeConn(c *net.UnixConn) wakeConn {
	rc, err := c.SyscallConn()
	if err != nil {
		// Only for a closed connection: reads and writes fail as on it.
		return wakeConn{}
	}
	return wakeConn{rc: rc}
}

// read reads wake-up bytes into b, waiting for one until the connection's
// read deadline; it returns io.EOF when the other end closed, and the
// connection's errors (net.ErrClosed, a timeout) as net.Conn's Read does.
func (w wakeConn) read(b []byte) (int, error) {
	if w.rc == nil {
		return 0, net.ErrClosed
	}
	var n int
	var errno syscall.Errno
	err := w.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the poller
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// wake writes one wake-up byte. A full socket buffer holds unread
// wake-ups already, so EAGAIN is a wake-up delivered; other errors are
// found by the reader of the other direction (watch, sleep).
func (w wakeConn) wake() {
	if w.rc == nil {
		return
	}
	_ = w.rc.Write(func(fd uintptr) bool {
		for {
			_, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&wakeByte[0])), 1)
			if e != syscall.EINTR {
				return true
			}
		}
	})
}
