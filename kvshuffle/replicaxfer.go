package kvshuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

// Messages. Every message starts with a 24-byte header:
//
//	0  magic "KVX1"
//	4  kind uint8, op uint8, 2 bytes zero
//	8  generation uint32, 4 bytes zero
//	16 checkpoint uint64
//
// followed by, per kind: xferFile a key; xferData file bytes; xferFileEnd
// nothing; xferEnd keep uint64, count uint32 and count keys (the manifest;
// none in a fetch); xferCredit the count of messages consumed (uint64);
// xferEndAck a status byte (0 ok) and a message; xferAbort a message: the
// sender gave up on the session, so nobody waits for it any more.
const (
	xferMagic  = "KVX1"
	xferHeader = 24
	xferChunk  = 512 << 10
	xferWindow = 8
)

// Message kinds and session ops.
const (
	xferFile byte = iota + 1
	xferData
	xferFileEnd
	xferEnd
	xferCredit
	xferEndAck
	xferAbort

	opCheckpoint byte = 1
	opFetch      byte = 2
)

type xferTag struct {
	op  byte
	gen uint32
	c   uint64
}

func (t xferTag) header(kind byte, extra int) []byte {
	b := make([]byte, xferHeader, xferHeader+extra)
	copy(b, xferMagic)
	b[4], b[5] = kind, t.op
	binary.LittleEndian.PutUint32(b[8:], t.gen)
	binary.LittleEndian.PutUint64(b[16:], t.c)
	return b
}

// copyItem is a file to send: its key and where to read it.
type copyItem struct {
	key  fileKey
	path string
}

// plan is one session: what this rank sends to whom (each destination
// once, ascending), whom it receives from, and where received files go.
type plan struct {
	tag      xferTag
	out      map[int][]copyItem
	manifest map[int][]fileKey // checkpoint: the manifest sent with the end
	keep     uint64
	from     []int
	// sink returns the directory a file from src goes to, or "" when this
	// rank has the file already (its bytes are then read and dropped).
	sink func(src int, k fileKey) (string, error)
	// done receives every file fully received and verified.
	done func(src int, k fileKey, path string)
}

// session runs p and then agrees with every rank that the whole session
// succeeded. It returns the bytes and files this rank sent.
func (s *Shuffle) session(ctx context.Context, p *plan) (int64, int, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	credits := make(map[int]chan uint64, len(p.out))
	acks := make(map[int]chan error, len(p.out))
	for d := range p.out {
		credits[d] = make(chan uint64, xferWindow+2)
		acks[d] = make(chan error, 1)
	}
	var sentBytes int64
	var sentFiles int
	var sendErr error
	sendDone := make(chan struct{})
	// The sender reads its own copies: receive clears its entries of acks
	// as the acknowledgements arrive.
	sendCredits, sendAcks := maps.Clone(credits), maps.Clone(acks)
	go func() { // owned by session, which waits for sendDone
		defer close(sendDone)
		for _, d := range slices.Sorted(maps.Keys(p.out)) {
			b, f, err := s.sendTo(sctx, p, d, sendCredits[d], sendAcks[d])
			sentBytes += b
			sentFiles += f
			if err != nil {
				sendErr = err
				cancel(err)
				return
			}
		}
	}()
	err := s.receive(sctx, p, credits, acks)
	if err != nil {
		cancel(err)
	}
	<-sendDone
	if sendErr != nil {
		err = sendErr
	}
	if err != nil {
		s.abortSession(p, err)
	}
	if err != nil && (pgas.NeedsRecovery(err) || ctx.Err() != nil) {
		return sentBytes, sentFiles, err
	}
	flag := []uint64{0}
	if err != nil {
		flag[0] = 1
	}
	if aerr := pgas.Allreduce(ctx, s.rt, nil, flag, pgas.OpMax); aerr != nil {
		return sentBytes, sentFiles, aerr
	}
	if err != nil {
		return sentBytes, sentFiles, err
	}
	if flag[0] != 0 {
		return sentBytes, sentFiles, fmt.Errorf("another rank could not copy checkpoint files: %w", ErrLost)
	}
	return sentBytes, sentFiles, nil
}

// abortSession tells every rank this one sends to or receives from in p,
// briefly and best effort, that it gave up, so that none of them waits
// for its messages; the session's agreement then fails everywhere.
func (s *Shuffle) abortSession(p *plan, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	msg := append(p.tag.header(xferAbort, 256), cause.Error()...)
	if len(msg) > xferHeader+256 {
		msg = msg[:xferHeader+256]
	}
	peers := slices.Concat(slices.Collect(maps.Keys(p.out)), p.from)
	slices.Sort(peers)
	for _, r := range slices.Compact(peers) {
		s.rt.PassiveSend(ctx, r, msg)
	}
}

// sendTo streams p.out[d] to rank d, then the end, and waits for d's
// acknowledgement of the end (or its abort, which ends the wait for
// credits too).
func (s *Shuffle) sendTo(ctx context.Context, p *plan, d int, credits <-chan uint64, ack <-chan error) (int64, int, error) {
	var nsent, credited uint64
	post := func(msg []byte) error {
		for nsent-credited >= xferWindow {
			select {
			case c := <-credits:
				credited = max(credited, c)
			case err := <-ack:
				return fmt.Errorf("rank %d gave up the copy: %w", d, err)
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if err := s.rt.PassiveSend(ctx, d, msg); err != nil {
			return err
		}
		nsent++
		return nil
	}
	var bytes int64
	buf := make([]byte, xferChunk)
	for _, it := range p.out[d] {
		if err := post(it.key.append(p.tag.header(xferFile, keyLen))); err != nil {
			return bytes, 0, err
		}
		if err := s.sendFile(it, buf, func(b []byte) error {
			bytes += int64(len(b))
			return post(append(p.tag.header(xferData, len(b)), b...))
		}); err != nil {
			return bytes, 0, err
		}
		if err := post(p.tag.header(xferFileEnd, 0)); err != nil {
			return bytes, 0, err
		}
	}
	keys := p.manifest[d]
	end := p.tag.header(xferEnd, 12+keyLen*len(keys))
	end = binary.LittleEndian.AppendUint64(end, p.keep)
	end = binary.LittleEndian.AppendUint32(end, uint32(len(keys)))
	for _, k := range keys {
		end = k.append(end)
	}
	if err := post(end); err != nil {
		return bytes, 0, err
	}
	select {
	case err := <-ack:
		if err != nil {
			return bytes, 0, fmt.Errorf("rank %d could not keep the files: %w", d, err)
		}
		return bytes, len(p.out[d]), nil
	case <-ctx.Done():
		return bytes, 0, context.Cause(ctx)
	}
}

// sendFile reads it's file in chunks of len(buf) and gives each to post.
func (s *Shuffle) sendFile(it copyItem, buf []byte, post func([]byte) error) error {
	f, err := os.Open(it.path)
	if err != nil {
		return fmt.Errorf("spill file to copy: %w", err)
	}
	defer f.Close()
	for off := int64(0); off < it.key.size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), it.key.size-off)], off)
		if n == 0 {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("spill file %s at %d: %w", it.path, off, err)
		}
		if err := post(buf[:n]); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

// inbound is the state of the stream from one source.
type inbound struct {
	consumed uint64
	ended    bool
	failed   error // a file could not be kept: reported in the end's ack
	key      fileKey
	f        *os.File // file being received; nil when skipped
	written  int64
}

func (in *inbound) abandon() {
	if in.f != nil {
		in.f.Close()
		os.Remove(in.f.Name())
		in.f = nil
	}
}

// receive consumes this session's messages until every source in p.from
// has ended and every destination of p.out has acknowledged its end.
// Messages of other sessions are dropped.
func (s *Shuffle) receive(ctx context.Context, p *plan, credits map[int]chan uint64, acks map[int]chan error) error {
	ins := make(map[int]*inbound, len(p.from))
	for _, r := range p.from {
		ins[r] = &inbound{}
	}
	defer func() {
		for _, in := range ins {
			in.abandon()
		}
	}()
	ends, pending := len(ins), len(p.out)
	for ends > 0 || pending > 0 {
		from, msg, err := s.recvPassive(ctx)
		if err != nil {
			return err
		}
		if len(msg) < xferHeader || string(msg[:4]) != xferMagic {
			s.log.Warn("passive message that is no checkpoint copy dropped", "from", from, "bytes", len(msg))
			continue
		}
		kind := msg[4]
		tag := xferTag{op: msg[5], gen: binary.LittleEndian.Uint32(msg[8:]), c: binary.LittleEndian.Uint64(msg[16:])}
		body := msg[xferHeader:]
		if tag != p.tag {
			s.log.Debug("copy message of another session dropped", "from", from, "kind", kind)
			continue
		}
		switch kind {
		case xferCredit:
			if ch := credits[from]; ch != nil && len(body) >= 8 {
				select {
				case ch <- binary.LittleEndian.Uint64(body):
				default:
				}
			}
			continue
		case xferEndAck:
			if ch := acks[from]; ch != nil && len(body) >= 1 {
				var e error
				if body[0] != 0 {
					e = fmt.Errorf("%s: %w", body[1:], ErrLost)
				}
				ch <- e
				acks[from] = nil
				pending--
			}
			continue
		case xferAbort:
			why := fmt.Errorf("rank %d gave up the session: %s: %w", from, body, ErrLost)
			if ch := acks[from]; ch != nil {
				ch <- why
				acks[from] = nil
				pending--
			}
			if in := ins[from]; in != nil && !in.ended {
				in.abandon()
				in.ended = true
				ends--
			}
			continue
		}
		in := ins[from]
		if in == nil || in.ended {
			s.log.Warn("checkpoint copy message from a rank that sends nothing now dropped", "from", from, "kind", kind)
			continue
		}
		if kind == xferEnd {
			if err := s.endInbound(ctx, p, from, in, body); err != nil {
				return err
			}
			ends--
			continue
		}
		if err := s.inboundMsg(p, from, in, kind, body); err != nil {
			return err
		}
		in.consumed++
		if in.consumed%(xferWindow/2) == 0 {
			cr := binary.LittleEndian.AppendUint64(p.tag.header(xferCredit, 8), in.consumed)
			if err := s.rt.PassiveSend(ctx, from, cr); err != nil {
				return err
			}
		}
	}
	return nil
}

// inboundMsg handles a file, data or file-end message from src. Problems
// with keeping the file are recorded in in.failed; the error return is
// for a malformed stream.
func (s *Shuffle) inboundMsg(p *plan, src int, in *inbound, kind byte, body []byte) error {
	what := fmt.Sprintf("checkpoint copy from rank %d", src)
	switch kind {
	case xferFile:
		if len(body) != keyLen || in.f != nil {
			return corrupt(what, xferHeader, "file header of %d bytes (file open: %v)", len(body), in.f != nil)
		}
		in.key, in.written = decodeKey(body), 0
		if in.failed != nil {
			return nil
		}
		dir, err := p.sink(src, in.key)
		if err == nil && dir != "" {
			in.f, err = os.CreateTemp(dir, "in-*.kvs")
		}
		if err != nil {
			in.failed = err
		}
	case xferData:
		in.written += int64(len(body))
		if in.f == nil {
			return nil
		}
		if in.written > in.key.size {
			in.abandon()
			in.failed = fmt.Errorf("%s: more than the %d bytes announced", what, in.key.size)
			return nil
		}
		if _, err := in.f.Write(body); err != nil {
			in.abandon()
			in.failed = err
		}
	case xferFileEnd:
		if in.f == nil {
			return nil
		}
		f := in.f
		in.f = nil
		err := f.Close()
		if err == nil && in.written != in.key.size {
			err = fmt.Errorf("%s: %d bytes, %d announced", what, in.written, in.key.size)
		}
		if err == nil {
			var h *os.File
			if h, err = checkSpill(in.key.spill(f.Name())); err == nil {
				h.Close()
			}
		}
		if err != nil {
			os.Remove(f.Name())
			in.failed = err
			return nil
		}
		p.done(src, in.key, f.Name())
	default:
		return corrupt(what, 4, "unknown message kind %d", kind)
	}
	return nil
}

// endInbound handles src's end: records its manifest (checkpoint) and
// acknowledges it with the stream's status.
func (s *Shuffle) endInbound(ctx context.Context, p *plan, src int, in *inbound, body []byte) error {
	what := fmt.Sprintf("checkpoint copy from rank %d", src)
	in.abandon()
	in.ended = true
	if len(body) < 12 {
		return corrupt(what, xferHeader, "end of %d bytes", len(body))
	}
	keep := binary.LittleEndian.Uint64(body)
	n := binary.LittleEndian.Uint32(body[8:])
	if uint64(len(body)-12) != uint64(n)*keyLen {
		return corrupt(what, xferHeader+8, "manifest of %d files in %d bytes", n, len(body)-12)
	}
	if in.failed == nil && p.tag.op == opCheckpoint {
		m := manifest{c: p.tag.c, keys: make([]fileKey, n)}
		for i := range m.keys {
			m.keys[i] = decodeKey(body[12+keyLen*i:])
		}
		for _, k := range m.keys {
			if _, ok := s.copies.has(k); !ok {
				in.failed = fmt.Errorf("checkpoint %d names %s, which this rank does not hold", p.tag.c, k.name())
			}
		}
		if in.failed == nil {
			s.copies.record(uint32(src), keep, m)
		}
	}
	ack := p.tag.header(xferEndAck, 1)
	if in.failed != nil {
		s.log.Warn("checkpoint files not kept", "from", src, "checkpoint", p.tag.c, "err", in.failed)
		ack = append(append(ack, 1), in.failed.Error()...)
		if len(ack) > 4096 {
			ack = ack[:4096]
		}
	} else {
		ack = append(ack, 0)
	}
	return s.rt.PassiveSend(ctx, src, ack)
}

// recvPassive waits for a passive message; a failure of a rank of the
// shuffle (the runtime's failure watch) interrupts it.
func (s *Shuffle) recvPassive(ctx context.Context) (int, []byte, error) {
	for {
		w, fresh := s.failures()
		if fresh {
			if err := s.checkRanks("checkpoint copy"); err != nil {
				return 0, nil, err
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() { // owned: ends with this call
			select {
			case <-w:
				cancel()
			case <-stop:
			}
		}()
		from, msg, err := s.rt.PassiveReceive(rctx)
		close(stop)
		cancel()
		if err == nil {
			return from, msg, nil
		}
		if ctx.Err() != nil {
			return 0, nil, context.Cause(ctx)
		}
		if !errors.Is(err, pgas.ErrTimeout) && rctx.Err() == nil {
			return 0, nil, err
		}
		if err := s.checkRanks("checkpoint copy"); err != nil {
			return 0, nil, err
		}
	}
}
