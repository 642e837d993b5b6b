package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Benchmarks compare the transport with plain Go TCP on loopback, measured
// in the same run: ping-pong of 8-byte messages (round-trip latency, with
// and without PollSpin) and one-way streams of 1 MiB and 4 MiB messages
// (bandwidth). Each reports the raw figure and the ratio:
//
//	go test -run '^$' -bench . -benchtime 2s ./transport/tcp
//
// x-raw is transport time / raw time for ping-pong (lower is better, 1 is
// parity) and transport bandwidth / raw bandwidth for streams (higher is
// better).

func BenchmarkPingPong(b *testing.B) {
	for _, spin := range []time.Duration{0, 10 * time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond} {
		b.Run(fmt.Sprintf("bytes=8/spin=%v", spin), func(b *testing.B) {
			b.ReportAllocs()
			raw := rawPingPong(b, b.N)
			run := transportPingPong(b, spin)
			run(100) // connect and warm up
			b.ResetTimer()
			run(b.N)
			b.StopTimer()
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			rawPer := float64(raw.Nanoseconds()) / float64(b.N)
			b.ReportMetric(rawPer, "raw-ns/op")
			b.ReportMetric(per/rawPer, "x-raw")
		})
	}
}

// transportPingPong returns a function that runs n round trips of 8-byte
// frames between two transports. Both replies are sent from HandleFrame:
// with one message in flight a write can never wait for the peer's reader,
// and the raw baseline also answers from its reading goroutine.
func transportPingPong(b *testing.B, spin time.Duration) func(n int) {
	ts := newCluster(b, 2, func(c *Config) { c.PollSpin = spin })
	ctx := context.Background()
	var left atomic.Int64
	done := make(chan struct{}, 1)
	var buf0, buf1 [8]byte
	h0 := newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		if err := p.ReadInto(buf0[:]); err != nil {
			return err
		}
		if left.Add(-1) == 0 {
			done <- struct{}{}
			return nil
		}
		ping := transport.Header{Type: transport.FramePassive, Seq: h.Seq + 1}
		return ts[0].Send(ctx, 1, &ping, buf0[:])
	})
	h1 := newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		if err := p.ReadInto(buf1[:]); err != nil {
			return err
		}
		pong := transport.Header{Type: transport.FramePassive, Seq: h.Seq}
		return ts[1].Send(ctx, 0, &pong, buf1[:])
	})
	if err := ts[0].Start(h0); err != nil {
		b.Fatal(err)
	}
	if err := ts[1].Start(h1); err != nil {
		b.Fatal(err)
	}
	return func(n int) {
		left.Store(int64(n))
		ping := transport.Header{Type: transport.FramePassive}
		if err := ts[0].Send(ctx, 1, &ping, buf0[:]); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case d := <-h0.downs:
			b.Fatalf("PeerDown during the benchmark: %v", d.err)
		}
	}
}

// rawPingPong times n round trips of 8 bytes over a plain loopback
// net.Conn, the server echoing from its reading goroutine.
func rawPingPong(b *testing.B, n int) time.Duration {
	client, server := rawPair(b)
	go func() {
		var buf [8]byte
		for {
			if _, err := io.ReadFull(server, buf[:]); err != nil {
				return
			}
			if _, err := server.Write(buf[:]); err != nil {
				return
			}
		}
	}()
	var buf [8]byte
	round := func() {
		if _, err := client.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		round()
	}
	start := time.Now()
	for range n {
		round()
	}
	return time.Since(start)
}

func BenchmarkStream(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("bytes=%dMiB", size>>20), func(b *testing.B) {
			b.ReportAllocs()
			raw := rawStream(b, size, b.N)
			run := transportStream(b, size)
			run(4) // connect and warm up
			b.SetBytes(int64(size))
			b.ResetTimer()
			run(b.N)
			b.StopTimer()
			mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
			b.ReportMetric(mbs(raw), "raw-MB/s")
			b.ReportMetric(mbs(b.Elapsed())/mbs(raw), "x-raw")
		})
	}
}

// transportStream returns a function that sends n frames of size bytes
// from proc 0 to proc 1 and waits until the last is read into place.
func transportStream(b *testing.B, size int) func(n int) {
	ts := newCluster(b, 2, nil)
	ctx := context.Background()
	src := make([]byte, size)
	dst := make([]byte, size)
	var left atomic.Int64
	done := make(chan struct{}, 1)
	h1 := newHandler(func(_ transport.Proc, _ *transport.Header, p transport.Payload) error {
		err := p.ReadInto(dst)
		if left.Add(-1) == 0 {
			done <- struct{}{}
		}
		return err
	})
	if err := ts[0].Start(newHandler(nil)); err != nil {
		b.Fatal(err)
	}
	if err := ts[1].Start(h1); err != nil {
		b.Fatal(err)
	}
	return func(n int) {
		left.Store(int64(n))
		for i := range n {
			h := transport.Header{Type: transport.FrameWrite, Seq: uint64(i)}
			if err := ts[0].Send(ctx, 1, &h, src); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	}
}

// rawStream times n writes of size bytes over a plain loopback net.Conn,
// until the reader has read the last one into its buffer.
func rawStream(b *testing.B, size, n int) time.Duration {
	client, server := rawPair(b)
	done := make(chan error, 1)
	dst := make([]byte, size)
	src := make([]byte, size)
	read := func(count int) {
		go func() {
			for range count {
				if _, err := io.ReadFull(server, dst); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	write := func(count int) {
		for range count {
			if _, err := client.Write(src); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	read(4)
	write(4)
	start := time.Now()
	read(n)
	write(n)
	return time.Since(start)
}

// rawPair returns both ends of a plain loopback TCP connection.
func rawPair(b *testing.B) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
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
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
	})
	return client, server
}
