package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
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
	rawNonce    = 16  // bytes of the secret that proves the dialer is rank 0
	rawExchange = 128 // bytes of the Bcast carrying the address and nonce
	// rawReadBuffer matches the pgas TCP transport's read buffer, so both
	// batch small messages the same way.
	rawReadBuffer = 64 << 10
)

// setupRaw connects rank 0 to a listener of rank 1. The listener's address
// and a fresh nonce travel through the runtime (a Bcast on the pair group),
// so a stray connection to the listener is refused. Only ranks 0 and 1
// call it.
func setupRaw(ctx context.Context, rt *pgas.Runtime, pair *pgas.Group, maxMsg int64) (*rawLink, error) {
	me := rt.Rank()
	var msg [rawExchange]byte
	var ln net.Listener
	var nonce [rawNonce]byte
	if me == 1 {
		l, addr, err := listenRaw(rt)
		if err != nil {
			return nil, fmt.Errorf("%w: listen: %v", ErrRaw, err)
		}
		ln = l
		defer ln.Close()
		if len(addr) > rawExchange-rawNonce-1 {
			return nil, fmt.Errorf("%w: listener address %q too long", ErrRaw, addr)
		}
		if _, err := rand.Read(nonce[:]); err != nil {
			return nil, fmt.Errorf("%w: nonce: %v", ErrRaw, err)
		}
		msg[0] = byte(len(addr))
		copy(msg[1:], addr)
		copy(msg[rawExchange-rawNonce:], nonce[:])
	}
	if err := rt.Bcast(ctx, pair, msg[:], 1); err != nil {
		return nil, fmt.Errorf("%w: exchanging the listener address: %w", ErrRaw, err)
	}
	var nc net.Conn
	if me == 0 {
		n := int(msg[0])
		if n == 0 || n > rawExchange-rawNonce-1 {
			return nil, fmt.Errorf("%w: rank 1 sent a listener address of %d bytes", ErrRaw, n)
		}
		addr := string(msg[1 : 1+n])
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%w: dial rank 1 at %s: %v", ErrRaw, addr, err)
		}
		if _, err := c.Write(msg[rawExchange-rawNonce:]); err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: greet rank 1 at %s: %v", ErrRaw, addr, err)
		}
		nc = c
	} else {
		c, err := acceptRank0(ctx, ln, nonce[:])
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
	env, err := bootstrap.FromEnv()
	if err != nil {
		return nil, "", err
	}
	return job.Listen(env)
}

// acceptRank0 accepts connections until one presents the nonce, within
// the ctx (deadline or cancellation) and at most a minute.
func acceptRank0(ctx context.Context, ln net.Listener, nonce []byte) (net.Conn, error) {
	deadline := time.Now().Add(time.Minute)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() }) // a cancelled or late run stops waiting
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("%w: waiting for rank 0 to connect: %v", ErrRaw, err)
		}
		got := make([]byte, len(nonce))
		_ = c.SetReadDeadline(deadline)
		if _, err := io.ReadFull(c, got); err != nil || subtle.ConstantTimeCompare(got, nonce) != 1 {
			c.Close() // not rank 0: a stray client
			continue
		}
		_ = c.SetReadDeadline(time.Time{})
		return c, nil
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
