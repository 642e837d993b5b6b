package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
)

// rawLink is the plain Go TCP connection between ranks 0 and 1 that the
// baselines run over: no framing, no acknowledgements, no runtime. It is
// owned by one goroutine (Run's) and closed by it, or by the run's ctx
// ending, which unblocks any read or write in progress.
type rawLink struct {
	nc   net.Conn
	br   *bufio.Reader
	buf  []byte // receive buffer, as large as the largest message
	stop func() bool
}

const (
	rawToken    = 32  // bytes of the pair's token, which the dialer proves it knows
	rawExchange = 128 // bytes of the Bcast carrying the address and token
	// rawReadBuffer matches the pgas TCP transport's read buffer, so both
	// batch small messages the same way.
	rawReadBuffer = 64 << 10
)

// setupRaw connects rank 0 to a listener of rank 1. The listener's address
// and a fresh token travel through the runtime (a Bcast on the pair group),
// and the listener (internal/listen) refuses a connection that does not
// prove the token, so a stray one cannot take rank 0's place. Only ranks 0 and 1
// call it.
func setupRaw(ctx context.Context, rt *pgas.Runtime, pair *pgas.Group, maxMsg int64) (*rawLink, error) {
	me := rt.Rank()
	var msg [rawExchange]byte
	var ln net.Listener
	var token [rawToken]byte
	if me == 1 {
		l, addr, err := listenRaw(rt)
		if err != nil {
			return nil, fmt.Errorf("%w: listen: %v", ErrRaw, err)
		}
		ln = l
		defer ln.Close() // acceptRank0's listener closes it too; this covers the failures before it
		if len(addr) > rawExchange-rawToken-1 {
			return nil, fmt.Errorf("%w: listener address %q too long", ErrRaw, addr)
		}
		if _, err := rand.Read(token[:]); err != nil {
			return nil, fmt.Errorf("%w: token: %v", ErrRaw, err)
		}
		msg[0] = byte(len(addr))
		copy(msg[1:], addr)
		copy(msg[rawExchange-rawToken:], token[:])
	}
	if err := rt.Bcast(ctx, pair, msg[:], 1); err != nil {
		return nil, fmt.Errorf("%w: exchanging the listener address: %w", ErrRaw, err)
	}
	var nc net.Conn
	if me == 0 {
		n := int(msg[0])
		if n == 0 || n > rawExchange-rawToken-1 {
			return nil, fmt.Errorf("%w: rank 1 sent a listener address of %d bytes", ErrRaw, n)
		}
		addr := string(msg[1 : 1+n])
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%w: dial rank 1 at %s: %v", ErrRaw, addr, err)
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		if _, _, err := auth.Dial(c, msg[rawExchange-rawToken:], auth.PurposeData, 0, false); err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: greet rank 1 at %s: %v", ErrRaw, addr, err)
		}
		_ = c.SetDeadline(time.Time{})
		nc = c
	} else {
		c, err := acceptRank0(ctx, ln, token[:])
		if err != nil {
			return nil, err
		}
		nc = c
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // as the pgas transport does
	}
	l := &rawLink{nc: nc, br: bufio.NewReaderSize(nc, rawReadBuffer), buf: make([]byte, max(maxMsg, 1))}
	l.stop = context.AfterFunc(ctx, func() { nc.Close() })
	return l, nil
}

// listenRaw binds rank 1's listener and returns it with the address rank
// 0 dials: on loopback when both ranks share a host, else on the address
// the runtime's own listeners are advertised with (PGAS_ADVERTISE_HOST,
// or this host's route to the rendezvous), which rank 0's host reaches.
func listenRaw(rt *pgas.Runtime) (net.Listener, string, error) {
	if rt.Host(0) == rt.Host(1) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		return ln, ln.Addr().String(), nil
	}
	return job.Listen()
}

// acceptRank0 takes the first connection that proves the token, within
// the ctx (deadline or cancellation) and at most a minute. It owns ln.
func acceptRank0(ctx context.Context, ln net.Listener, token []byte) (net.Conn, error) {
	deadline := time.Now().Add(time.Minute)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	got := make(chan net.Conn, 1)
	lis, err := listen.New(ln, listen.Config{
		Name: "raw baseline", Purpose: auth.PurposeData, Token: token, Self: 1,
		HandshakeTimeout: time.Until(deadline),
	}, func(c net.Conn, _ uint32) {
		select {
		case got <- c:
		default:
			c.Close() // rank 0 is connected already
		}
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("%w: %v", ErrRaw, err)
	}
	lis.Start()
	defer lis.Close()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	select {
	case c := <-got:
		_ = c.SetDeadline(time.Time{})
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for rank 0 to connect: %v", ErrRaw, context.Cause(ctx))
	}
}

func (l *rawLink) close() {
	if l == nil {
		return
	}
	l.stop()
	l.nc.Close()
}

// err wraps an I/O error, preferring the ctx's verdict.
func (l *rawLink) err(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w", ErrRaw, what, context.Cause(ctx))
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: the peer closed the connection", ErrRaw, what)
	}
	return fmt.Errorf("%w: %s: %v", ErrRaw, what, err)
}

// sendStream writes count messages of src and waits for the receiver's
// one-byte acknowledgement that all of them arrived. It returns the time
// from the first write to the acknowledgement.
func (l *rawLink) sendStream(ctx context.Context, src []byte, count int) (time.Duration, error) {
	start := time.Now()
	for range count {
		if _, err := l.nc.Write(src); err != nil {
			return 0, l.err(ctx, "stream write", err)
		}
	}
	if _, err := l.br.ReadByte(); err != nil {
		return 0, l.err(ctx, "stream acknowledgement", err)
	}
	return time.Since(start), nil
}

// recvStream reads count messages of size bytes, then acknowledges them.
func (l *rawLink) recvStream(ctx context.Context, size int64, count int) error {
	dst := l.buf[:size]
	for range count {
		if _, err := io.ReadFull(l.br, dst); err != nil {
			return l.err(ctx, "stream read", err)
		}
	}
	if _, err := l.nc.Write([]byte{1}); err != nil {
		return l.err(ctx, "stream acknowledgement", err)
	}
	return nil
}

// ping runs iters round trips of src from rank 0; samples, when not nil,
// receives each round trip's time.
func (l *rawLink) ping(ctx context.Context, src []byte, iters int, samples []time.Duration) error {
	dst := l.buf[:len(src)]
	for i := range iters {
		start := time.Now()
		if _, err := l.nc.Write(src); err != nil {
			return l.err(ctx, "ping write", err)
		}
		if _, err := io.ReadFull(l.br, dst); err != nil {
			return l.err(ctx, "pong read", err)
		}
		if samples != nil {
			samples[i] = time.Since(start)
		}
	}
	return nil
}

// pong answers iters round trips of src on rank 1.
func (l *rawLink) pong(ctx context.Context, src []byte, iters int) error {
	dst := l.buf[:len(src)]
	for range iters {
		if _, err := io.ReadFull(l.br, dst); err != nil {
			return l.err(ctx, "ping read", err)
		}
		if _, err := l.nc.Write(src); err != nil {
			return l.err(ctx, "pong write", err)
		}
	}
	return nil
}
