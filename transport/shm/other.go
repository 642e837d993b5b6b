//go:build !linux

package shm

import (
	"context"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Transport is the shared-memory transport; it exists only on Linux.
type Transport struct{}

// New returns ErrUnsupported.
func New(cfg Config) (*Transport, error) { return nil, ErrUnsupported }

func (t *Transport) Addr() string                             { return "" }
func (t *Transport) Self() transport.Proc                     { return transport.NoProc }
func (t *Transport) SetPeers(map[transport.Proc]string) error { return ErrUnsupported }
func (t *Transport) Start(transport.Handler) error            { return ErrUnsupported }
func (t *Transport) Close() error                             { return nil }
func (t *Transport) Disconnect(transport.Proc, error)         {}
func (t *Transport) Connected(transport.Proc) bool            { return false }
func (t *Transport) SetSpin(time.Duration)                    {}
func (t *Transport) ShareMemory(transport.MemoryFunc)         {}
func (t *Transport) FetchMemory(context.Context, transport.Proc, uint64) (int, uint64, error) {
	return -1, 0, ErrUnsupported
}
func (t *Transport) Send(context.Context, transport.Proc, *transport.Header, []byte) error {
	return ErrUnsupported
}
