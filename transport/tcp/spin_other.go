//go:build !unix

package tcp

import (
	"io"
	"net"
	"time"
)

// newSocketReader returns nc: polling is only implemented on unix.
func newSocketReader(nc net.Conn, _ time.Duration) io.Reader { return nc }

// socketWriter is only implemented on unix: small frames go through the
// connection's writer.
type socketWriter struct{}

func newSocketWriter(net.Conn) *socketWriter { return nil }

func (*socketWriter) write([]byte) (int, error) { return 0, nil }
