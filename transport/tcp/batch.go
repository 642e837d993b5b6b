package tcp

import (
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// The connection's batch (Config.BatchFrame) and the small frames that
// skip it: queued, lingering (SendLater) or written by their caller when
// the connection is idle (writeNow).

// enqueue adds a small frame to the batch and wakes the writer, or, for a
// frame that may linger (SendLater), sets the timer that wakes it unless
// a frame that must leave now comes first. False when the batch has no
// room for it (the caller writes it itself).
func (c *conn) enqueue(h *transport.Header, payload []byte, linger bool) bool {
	size := transport.HeaderSize + len(payload)
	c.bmu.Lock()
	if c.batchShut || len(c.batch)+size > c.t.cfg.BatchBytes {
		c.bmu.Unlock()
		return false
	}
	c.appendFrame(h, payload)
	kick := false
	switch {
	case c.kicked:
	case !linger || c.t.cfg.Linger == 0:
		c.kicked, kick = true, true
	case !c.lingering:
		c.lingering = true
		c.armLinger()
	}
	c.bmu.Unlock()
	c.touch()
	if kick {
		c.kickWriter()
	}
	return true
}

// armLinger sets the timer that sends the batch's lingering frames. bmu
// is held.
func (c *conn) armLinger() {
	if c.lingerTimer == nil {
		c.lingerTimer = time.AfterFunc(c.t.cfg.Linger, c.lingerEnded)
		return
	}
	c.lingerTimer.Reset(c.t.cfg.Linger)
}

// lingerEnded wakes the writer for frames that lingered Config.Linger,
// unless a frame that must leave now did already.
func (c *conn) lingerEnded() {
	c.bmu.Lock()
	c.lingering = false
	kick := !c.kicked && len(c.batch) > 0
	c.kicked = c.kicked || kick
	c.bmu.Unlock()
	if kick {
		c.kickWriter()
	}
}

// appendFrame encodes a frame at the end of the batch. bmu is held.
func (c *conn) appendFrame(h *transport.Header, payload []byte) {
	n := len(c.batch)
	c.batch = slices.Grow(c.batch, transport.HeaderSize+len(payload))[:n+transport.HeaderSize]
	h.Encode(c.batch[n:])
	c.batch = append(c.batch, payload...)
	c.batchFrames++
	c.batchPayload += len(payload)
}

func (c *conn) kickWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// writeNow writes a small frame that must leave now, with the batch
// before it, from the caller, when the connection is idle (the write
// token is free): one non-blocking write, no goroutine in between. What
// the socket does not take at once goes to the connection's writer, ahead
// of anything queued since, as a failed write does (the writer's own
// write then fails the connection). It reports false when it did nothing:
// no raw socket, the token is held (a write is in progress and the frame
// is queued behind it), or the connection is closing for idleness.
func (c *conn) writeNow(h *transport.Header, payload []byte) (bool, error) {
	if c.now == nil {
		return false, nil
	}
	select {
	case c.wsem <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-c.wsem }()
	if c.retiring {
		return true, errRetired
	}
	c.bmu.Lock()
	if c.batchShut {
		c.bmu.Unlock()
		return false, nil
	}
	c.appendFrame(h, payload)
	c.bmu.Unlock()
	c.touch()
	b, frames, pl := c.takeBatch()
	n, err := c.now.write(b)
	if err != nil || n < len(b) {
		c.nowShort.Add(1)
		c.requeue(b[n:], frames, pl) // counted once the writer wrote them
		return true, nil
	}
	c.t.stats.framesOut.Add(uint64(frames))
	c.t.stats.bytesOut.Add(uint64(pl))
	return true, nil
}

// takeBatch hands the batch to the holder of the write token, which
// writes it before anything else (or gives it back with requeue).
func (c *conn) takeBatch() (b []byte, frames, payload int) {
	c.bmu.Lock()
	b, frames, payload = c.batch, c.batchFrames, c.batchPayload
	c.batch, c.wbuf = c.wbuf[:0], b
	c.batchFrames, c.batchPayload = 0, 0
	c.kicked = false
	c.bmu.Unlock()
	return b, frames, payload
}

// requeue puts back a batch of which nothing was written, ahead of what
// was queued since, and wakes the writer.
func (c *conn) requeue(b []byte, frames, payload int) {
	if len(b) == 0 {
		return
	}
	c.bmu.Lock()
	nb := make([]byte, 0, len(b)+len(c.batch))
	c.batch = append(append(nb, b...), c.batch...)
	c.batchFrames += frames
	c.batchPayload += payload
	c.kicked = true
	c.bmu.Unlock()
	c.kickWriter()
}
