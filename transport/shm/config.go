package shm

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// Ring sizes accepted by Config.Validate, in bytes of payload area.
const (
	MinRingSize     = 64 << 10
	MaxRingSize     = 256 << 20
	DefaultRingSize = 2 << 20
)

// Config configures a Transport. Start from DefaultConfig, then set Self and
// Token.
type Config struct {
	// Self is this process's ID. Required; NoProc is not allowed.
	Self transport.Proc
	// Token is the job token (internal/auth). Every connection proves
	// knowledge of it before a ring is mapped. At least 16 bytes.
	Token []byte
	// RingSize is the payload area of each ring (one per ordered pair of
	// processes that talk), a power of two in MinRingSize..MaxRingSize. A
	// frame that fits is written whole once there is room for it; a larger
	// one streams through.
	RingSize int
	// Spin is how long a receiver that finds its ring empty, or a sender
	// that finds it full, keeps polling before it sleeps. A polling
	// receiver sees a frame within a fraction of a microsecond; a sleeping
	// one needs a wake-up through its Unix socket (tens of microseconds
	// here). Spinning burns a core, so keep it 0 on hosts with more ranks
	// than cores.
	Spin time.Duration
	// HandshakeTimeout bounds the authentication and ring set-up of one
	// connection. Must be > 0.
	HandshakeTimeout time.Duration
	// Faults, when set, injects network-like faults into this process's
	// rings, as the chaos suite's PGAS_NETFAULTS does into its TCP
	// connections (package job passes internal/netfault's injector).
	Faults Faults
	// Logger receives connection events at Debug and refusals at Warn.
	// Nil discards them.
	Logger *slog.Logger
}

// Faults delays frames as a faulty network would. Hold is called before a
// frame of n payload bytes is written (send) and before one is delivered
// (!send); it blocks as long as the fault demands (a delay, a partition of
// this process) or until ctx ends, and then returns ctx's error.
type Faults interface {
	Hold(ctx context.Context, n int, send bool) error
}

// DefaultSpin is Config.Spin in DefaultConfig.
const DefaultSpin = 20 * time.Microsecond

// DefaultConfig returns the settings for a job: 2 MiB rings, a 20 µs spin.
func DefaultConfig() Config {
	return Config{Self: transport.NoProc, RingSize: DefaultRingSize, Spin: DefaultSpin, HandshakeTimeout: 10 * time.Second}
}

// Validate checks the configuration without changing it.
func (c *Config) Validate() error {
	switch {
	case c.Self == transport.NoProc:
		return fmt.Errorf("%w: Self is not set", ErrConfig)
	case len(c.Token) < auth.MinTokenSize:
		return fmt.Errorf("%w: Token has %d bytes, want at least %d", ErrConfig, len(c.Token), auth.MinTokenSize)
	case c.RingSize < MinRingSize || c.RingSize > MaxRingSize || c.RingSize&(c.RingSize-1) != 0:
		return fmt.Errorf("%w: RingSize is %d; want a power of two in %d..%d", ErrConfig, c.RingSize, MinRingSize, MaxRingSize)
	case c.Spin < 0:
		return fmt.Errorf("%w: Spin is %v, want >= 0", ErrConfig, c.Spin)
	case c.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: HandshakeTimeout is %v, want > 0", ErrConfig, c.HandshakeTimeout)
	}
	return nil
}
