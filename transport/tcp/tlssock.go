package tcp

import (
	"errors"
	"net"
	"os"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// tlsSocketOf finds the tlsSocket under a data connection, or nil.
func tlsSocketOf(nc net.Conn) *tlsSocket {
	for {
		switch c := nc.(type) {
		case *tlsSocket:
			return c
		case *watchedConn:
			nc = c.Conn
		case auth.Conn:
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// maxCoalesce is the largest frame a TLS connection copies into one write
// (one TLS record): a separate record for the header would cost a second
// system call and 22 bytes of TLS overhead per frame.
const maxCoalesce = 16 << 10

// writeTLS writes parts (batched frames, a header, a payload) through
// TLS, armed: its records are batched, and a write cut off by the ctx's
// deadline leaves the rest of them in c.sock.rest.
func (c *conn) writeTLS(parts ...[]byte) (int64, error) {
	c.sock.armed = true
	defer func() { c.sock.armed = false }()
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	var n int64
	var err error
	if total <= maxCoalesce {
		c.scratch = c.scratch[:0]
		for _, p := range parts {
			c.scratch = append(c.scratch, p...)
		}
		var k int
		k, err = c.nc.Write(c.scratch)
		n = int64(k)
	} else {
		for _, p := range parts {
			if len(p) == 0 {
				continue
			}
			var k int
			k, err = c.nc.Write(p)
			n += int64(k)
			if err != nil {
				break
			}
		}
	}
	if ferr := c.sock.flush(); err == nil {
		err = ferr
	}
	return n, err
}

// tlsSocket is the socket under a TLS data connection (Config.TLS). TLS
// writes a large frame as records of 16 KiB, one write each; while a Send
// is writing (armed), tlsSocket batches them (up to maxBatch) so that a
// frame costs few system calls, as a plain one does with writev. A TLS
// record that was cut off cannot be resumed either, so where a plain frame
// whose Send's ctx ended mid-write is finished in the background from its
// bytes, a TLS frame is finished from its records: a write that fails on
// the past deadline the ctx set keeps the unwritten rest of the batch, and
// the rest of the frame's records, in rest and reports them written; the
// Send then hands rest to a background writer (conn.finishWrite). The
// holder of the write token owns every field.
type tlsSocket struct {
	net.Conn
	armed bool
	out   []byte // records batched while armed, written by flush
	rest  []byte // records accepted but not yet on the wire; nil: none
}

// maxBatch bounds the records a tlsSocket batches before it writes them.
const maxBatch = 256 << 10

func (s *tlsSocket) Write(b []byte) (int, error) {
	switch {
	case s.rest != nil:
		s.rest = append(s.rest, b...)
		return len(b), nil
	case !s.armed:
		return s.Conn.Write(b) // the handshake, an alert
	}
	s.out = append(s.out, b...)
	if len(s.out) >= maxBatch {
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// flush writes the batched records. A write cut by the deadline of the
// Send's ctx moves what it did not write to rest.
func (s *tlsSocket) flush() error {
	if len(s.out) == 0 {
		return nil
	}
	n, err := s.Conn.Write(s.out)
	if err != nil && n < len(s.out) && errors.Is(err, os.ErrDeadlineExceeded) {
		s.rest = append(make([]byte, 0, 2*(len(s.out)-n)), s.out[n:]...)
		err = nil
	}
	s.out = s.out[:0]
	return err
}
