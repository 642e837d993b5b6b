package mem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

type countHandler struct{ got chan struct{} }

func (c countHandler) HandleFrame(_ transport.Proc, _ *transport.Header, p transport.Payload) error {
	err := p.Discard()
	c.got <- struct{}{}
	return err
}

func (countHandler) PeerDown(transport.Proc, error) {}

// BenchmarkSend measures one-way streaming between two endpoints.
func BenchmarkSend(b *testing.B) {
	for _, size := range []int{0, 64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			nw := mem.NewNetwork(2, mem.DefaultConfig())
			defer nw.Close()
			recv := countHandler{got: make(chan struct{}, 1024)}
			if err := nw.Endpoint(0).Start(countHandler{}); err != nil {
				b.Fatal(err)
			}
			if err := nw.Endpoint(1).Start(recv); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			done := make(chan struct{})
			go func() {
				for range b.N {
					<-recv.got
				}
				close(done)
			}()
			b.ResetTimer()
			for i := range b.N {
				h := transport.Header{Type: transport.FrameWrite, Seq: uint64(i)}
				if err := nw.Endpoint(0).Send(ctx, 1, &h, payload); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}
