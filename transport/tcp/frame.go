package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/transport"
)

// counters are the Stats of a Transport, updated atomically.
type counters struct {
	framesIn, framesOut atomic.Uint64
	bytesIn, bytesOut   atomic.Uint64
	handshakesRefused   atomic.Uint64
	probes              atomic.Uint64
	badFrames           atomic.Uint64
	handlerErrors       atomic.Uint64
	peersDown           atomic.Uint64
	dialAttempts        atomic.Uint64
	dialsCrossed        atomic.Uint64
	connections         atomic.Int64
	idleClosed          atomic.Uint64
}

// payload is the transport.Payload of one received frame: a window of Len
// bytes of the connection's stream. It is valid only while HandleFrame runs.
type payload struct {
	br   *bufio.Reader
	n    int   // Header.Len
	left int   // bytes not yet taken from the stream
	err  error // first stream error; the connection is lost
	live bool  // HandleFrame is running
	used bool  // ReadInto or Discard was called
}

var errPayloadGone = errors.New("tcp: payload used after HandleFrame returned")

func (p *payload) Len() int { return p.n }

// ReadInto reads the whole payload into dst. bufio.Reader hands reads at
// least as large as its buffer straight to the socket once its buffer is
// drained, so a bulk payload lands in dst without an intermediate copy.
func (p *payload) ReadInto(dst []byte) error {
	switch {
	case !p.live:
		return errPayloadGone
	case p.used:
		return fmt.Errorf("tcp: payload of %d bytes already consumed", p.n)
	case len(dst) != p.n:
		return fmt.Errorf("tcp: ReadInto with %d bytes for a %d-byte payload", len(dst), p.n)
	}
	p.used = true
	k, err := io.ReadFull(p.br, dst)
	p.left -= k
	if err != nil {
		p.err = streamErr(err)
		return p.err
	}
	return nil
}

// Discard drops whatever the handler has not read.
func (p *payload) Discard() error {
	if !p.live {
		return errPayloadGone
	}
	p.used = true
	return p.skip()
}

func (p *payload) skip() error {
	if p.err != nil {
		return p.err
	}
	k, err := p.br.Discard(p.left)
	p.left -= k
	if err != nil {
		p.err = streamErr(err)
	}
	return p.err
}

// streamErr turns an EOF inside a frame into io.ErrUnexpectedEOF.
func streamErr(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// frameReader reads frames from one authenticated connection.
type frameReader struct {
	br    *bufio.Reader
	from  transport.Proc
	stats *counters
	hdr   [transport.HeaderSize]byte
	cur   transport.Header // the frame being handled: lent to the handler for the call
	pl    payload
	link  func(*transport.Header) error // a FrameLink's handling (nil: refused as malformed)
	touch func()                        // a frame came
}

func newFrameReader(br *bufio.Reader, from transport.Proc, stats *counters, link func(*transport.Header) error, touch func()) *frameReader {
	return &frameReader{br: br, from: from, stats: stats, pl: payload{br: br}, link: link, touch: touch}
}

// run delivers frames to h until the stream fails. It returns io.EOF when
// the peer closed the connection between frames, an error wrapping
// transport.ErrBadFrame for a malformed header, and the read error
// otherwise. Nothing is allocated from a length read off the wire: the
// header is checked (Len <= MaxPayload) before the handler sees it, and
// the reader itself only ever skips payload bytes.
func (r *frameReader) run(h transport.Handler, onHandlerErr func(*transport.Header, error)) error {
	for {
		if r.br.Buffered() == 0 {
			// The next read goes to the socket and, most often, finds it
			// empty and parks. Let what the frames just handled woke (a
			// batch writer with a reply, a waiting caller) run first: it
			// then goes out ahead of that read's system call, not after.
			runtime.Gosched()
		}
		if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
			return err // io.EOF between frames, io.ErrUnexpectedEOF inside a header
		}
		// The same Header for every frame: a handler that keeps it
		// copies it (the transport package's contract), and a stream of
		// small frames allocates nothing here.
		var err error
		r.cur, err = transport.DecodeHeader(r.hdr[:])
		if err != nil {
			r.stats.badFrames.Add(1)
			return err
		}
		hd := &r.cur
		hd.Src = r.from // the authenticated peer, whatever the wire says
		if hd.Type == transport.FrameLink {
			// The connection's own business, not the handler's (idle.go).
			if hd.Len != 0 || r.link == nil {
				r.stats.badFrames.Add(1)
				return fmt.Errorf("%w: link frame with %d payload bytes", transport.ErrBadFrame, hd.Len)
			}
			if err := r.link(hd); err != nil {
				if errors.Is(err, transport.ErrBadFrame) {
					r.stats.badFrames.Add(1)
				}
				return err
			}
			continue
		}
		if r.touch != nil {
			r.touch()
		}
		r.pl = payload{br: r.br, n: int(hd.Len), left: int(hd.Len), live: true}
		r.stats.framesIn.Add(1)
		r.stats.bytesIn.Add(uint64(hd.Len))
		herr := h.HandleFrame(r.from, hd, &r.pl)
		r.pl.live = false
		if err := r.pl.skip(); err != nil {
			return err
		}
		if herr != nil {
			r.stats.handlerErrors.Add(1)
			if onHandlerErr != nil {
				onHandlerErr(hd, herr)
			}
		}
	}
}
