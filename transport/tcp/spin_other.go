//go:build !unix

package tcp

import (
	"io"
	"net"
	"time"
)

// newSocketReader returns nc: polling is only implemented on unix.
func newSocketReader(nc net.Conn, _ time.Duration) io.Reader { return nc }
