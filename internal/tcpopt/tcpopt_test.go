package tcpopt

import (
	"context"
	"net"
	"testing"
	"time"
)

// bound reads the retransmission bound of c's socket.
func bound(t *testing.T, c net.Conn) (int, bool) {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var ok bool
	if err := rc.Control(func(fd uintptr) { v, ok = retransmitBound(int(fd)) }); err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// TestBothSidesAreBounded: a connection dialed with Control and one
// accepted and tuned both resend at least every MaxRetransmit.
func TestBothSidesAreBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := net.Dialer{Control: Control}
	dc, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ac, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer ac.Close()
	before, ok := bound(t, ac)
	if !ok {
		t.Skip("this kernel has no TCP_RTO_MAX_MS (Linux 6.15 or later has it): connections keep the kernel's backoff")
	}
	Tune(ac)
	want := int(MaxRetransmit.Milliseconds())
	if v, _ := bound(t, dc); v != want {
		t.Errorf("dialed connection: bound %d ms, want %d", v, want)
	}
	if v, _ := bound(t, ac); v != want {
		t.Errorf("accepted connection after Tune: bound %d ms (before: %d), want %d", v, before, want)
	}
	if before == want {
		t.Errorf("accepted connection before Tune already at %d ms: the test cannot tell Tune did it", before)
	}
}

// TestTuneLeavesOtherConnsAlone: a connection that is not TCP is not
// touched and does not panic.
func TestTuneLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	Tune(a)
}
