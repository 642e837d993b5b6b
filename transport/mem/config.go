package mem

import (
	"fmt"
	"log/slog"
)

// DefaultQueueLen is the per-link queue length used when Config.QueueLen is
// zero.
const DefaultQueueLen = 64

// maxQueueLen caps Config.QueueLen: a link buffers up to QueueLen copied
// payloads, so an absurd value is a memory bomb rather than a tuning choice.
const maxQueueLen = 1 << 16

// Config configures a Network.
type Config struct {
	// Seed drives every random fault decision (Drop probabilities, Delay
	// jitter). Each directed link draws from its own stream derived from
	// (Seed, from, to), so the k-th frame on a link meets the same decision
	// in every run with the same Seed, whatever the goroutine schedule.
	// Tests print it on failure so a run can be replayed.
	Seed int64
	// QueueLen is how many frames (not bytes) each directed link holds
	// before Send blocks, the in-memory analogue of a socket buffer. Small
	// values expose flow-control bugs; each queued frame holds a copy of its
	// payload, so QueueLen times the largest payload bounds a link's memory.
	// Zero means DefaultQueueLen.
	QueueLen int
	// Logger receives fault events (kills, partitions, drops) at Info and
	// handler errors at Debug, with proc attributes. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the configuration for simulations: seed 1 and
// DefaultQueueLen frames per link.
func DefaultConfig() Config {
	return Config{Seed: 1, QueueLen: DefaultQueueLen}
}

// LocalConfig returns the configuration for unit tests: seed 1 and short
// queues (4 frames), so that backpressure is reached and tested quickly.
func LocalConfig() Config {
	return Config{Seed: 1, QueueLen: 4}
}

// Validate checks the configuration without changing it.
func (c Config) Validate() error {
	if c.QueueLen < 0 || c.QueueLen > maxQueueLen {
		return fmt.Errorf("%w: QueueLen is %d; use 0 for the default (%d) or a frame count in 1..%d",
			ErrConfig, c.QueueLen, DefaultQueueLen, maxQueueLen)
	}
	return nil
}

func (c Config) queueLen() int {
	if c.QueueLen == 0 {
		return DefaultQueueLen
	}
	return c.QueueLen
}
