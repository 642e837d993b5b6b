package kvshuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

// Replicas: the spill files a checkpoint state names, copied to the ranks
// that hold the state's mirrors on other hosts (Config.Holders), so that a
// rank taken over on another host gets them back.
//
// The copies travel as pgas passive messages, inside the collective calls
// Checkpoint and RollBack, with credit-based flow control: a sender has at
// most xferWindow messages unconsumed at a receiver, so the runtime's
// passive inbox never overflows. One session is one such exchange; every
// rank takes part, sends what it must (possibly nothing) and receives from
// the ranks that the session's plan (the same on every rank) says will
// send to it. A session ends with an Allreduce, so when it returns on any
// rank every message of it has been consumed everywhere, and a later
// session never meets an earlier one's messages except those of a session
// cut short by a failure, which carry another (op, generation, checkpoint)
// tag and are dropped.
//
// A holder keeps each source's copies in its own directory under SpillDir,
// named by content (source rank, size, pairs, checksum), with the
// manifests (the files each checkpoint state names) of the checkpoints the
// source has not released yet. A copy named by no kept manifest is
// deleted. RollBack to c drops the manifests above c (an abandoned
// timeline) everywhere.

// fileKey names a spill file by content. Two files with the same key
// hold the same pairs (or a CRC-32C collision of equal sizes and counts),
// so either serves.
type fileKey struct {
	src   uint32
	crc   uint32
	size  int64
	pairs uint64
}

func keyOf(src int, f stateFile) fileKey {
	return fileKey{src: uint32(src), crc: f.crc, size: f.size, pairs: f.pairs}
}

func (k fileKey) name() string {
	return fmt.Sprintf("r%d-%d-%d-%08x.kvs", k.src, k.size, k.pairs, k.crc)
}

func (k fileKey) spill(path string) *spillFile {
	return &spillFile{path: path, size: k.size, pairs: k.pairs, crc: k.crc}
}

const keyLen = 24

func (k fileKey) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, k.src)
	b = binary.LittleEndian.AppendUint32(b, k.crc)
	b = binary.LittleEndian.AppendUint64(b, uint64(k.size))
	return binary.LittleEndian.AppendUint64(b, k.pairs)
}

func decodeKey(b []byte) fileKey {
	return fileKey{
		src:   binary.LittleEndian.Uint32(b),
		crc:   binary.LittleEndian.Uint32(b[4:]),
		size:  int64(binary.LittleEndian.Uint64(b[8:])),
		pairs: binary.LittleEndian.Uint64(b[16:]),
	}
}

// manifest is the list of files checkpoint c of a source names.
type manifest struct {
	c    uint64
	keys []fileKey
}

// replicaStore is what this rank holds for other ranks.
type replicaStore struct {
	mu        sync.Mutex
	dir       string // created at the first copy
	files     map[fileKey]string
	manifests map[uint32][]manifest
	bytes     int64
}

func newReplicaStore() *replicaStore {
	return &replicaStore{files: make(map[fileKey]string), manifests: make(map[uint32][]manifest)}
}

func (rs *replicaStore) has(k fileKey) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p, ok := rs.files[k]
	return p, ok
}

// ensureDir returns the store's directory under spillDir, creating it.
func (rs *replicaStore) ensureDir(s *Shuffle, rank int) (string, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	s.waitIfDiskLost(&rs.mu)
	spillDir := s.cfg.SpillDir
	if rs.dir != "" {
		if _, err := os.Stat(rs.dir); err != nil {
			rs.dir = ""
		}
	}
	if rs.dir == "" {
		if spillDir == "" {
			return "", errors.New("no SpillDir to keep copies in")
		}
		if err := os.MkdirAll(spillDir, 0o755); err != nil {
			return "", fmt.Errorf("copy directory: %w", err)
		}
		d, err := os.MkdirTemp(spillDir, fmt.Sprintf("kvshuffle-copies-r%d-", rank))
		if err != nil {
			return "", fmt.Errorf("copy directory: %w", err)
		}
		rs.dir = d
	}
	return rs.dir, nil
}

func (rs *replicaStore) add(k fileKey, path string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if old, ok := rs.files[k]; ok && old != path {
		os.Remove(path)
		return
	}
	rs.files[k] = path
	rs.bytes += k.size
}

// record keeps manifest m of source src, drops the manifests the source
// released (below keep) or redoes (at or above m.c), and deletes the
// copies of src that no kept manifest names. Only src's: other sources'
// sessions may be under way, their files not named by a manifest yet.
func (rs *replicaStore) record(src uint32, keep uint64, m manifest) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	ms := slices.DeleteFunc(rs.manifests[src], func(x manifest) bool { return x.c < keep || x.c >= m.c })
	rs.manifests[src] = append(ms, m)
	rs.gcLocked(func(k fileKey) bool { return k.src == src })
}

// rollBack drops the manifests above c (the abandoned timeline) and the
// copies they alone named.
func (rs *replicaStore) rollBack(c uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for src, ms := range rs.manifests {
		rs.manifests[src] = slices.DeleteFunc(ms, func(x manifest) bool { return x.c > c })
	}
	rs.gcLocked(func(fileKey) bool { return true })
}

// gcLocked deletes the copies in scope that no kept manifest names.
func (rs *replicaStore) gcLocked(scope func(fileKey) bool) {
	named := make(map[fileKey]bool)
	for _, ms := range rs.manifests {
		for _, m := range ms {
			for _, k := range m.keys {
				named[k] = true
			}
		}
	}
	for k, p := range rs.files {
		if scope(k) && !named[k] {
			os.Remove(p)
			delete(rs.files, k)
			rs.bytes -= k.size
		}
	}
}

// removeAll deletes every copy and the directory.
func (rs *replicaStore) removeAll() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	clear(rs.files)
	clear(rs.manifests)
	rs.bytes = 0
	if rs.dir == "" {
		return nil
	}
	err := os.RemoveAll(rs.dir)
	rs.dir = ""
	return err
}

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

// copyTargets returns the holders of rank's checkpoint files: the ranks of
// Config.Holders(rank) on another host than rank. On the same host a
// file is kept by reference: whatever loses the rank's disk loses that
// holder too.
func (s *Shuffle) copyTargets(rank int) []int {
	var out []int
	for _, h := range s.cfg.Holders(rank) {
		if h != rank && h >= 0 && h < s.rt.Size() && s.rt.Host(h) != s.rt.Host(rank) {
			out = append(out, h)
		}
	}
	return out
}

// replicate copies the files of checkpoint state st that its holders on
// other hosts lack, with the manifest. Collective (a session).
func (s *Shuffle) replicate(ctx context.Context, st *state) error {
	spans := false // some rank has a holder on another host: every rank computes the same
	for _, src := range s.aRanks {
		spans = spans || len(s.copyTargets(src)) > 0
	}
	if !spans {
		return nil // one host: files by reference, no session
	}
	t0 := time.Now()
	me := s.rank
	p := &plan{
		tag:      xferTag{op: opCheckpoint, gen: s.gen.Load(), c: st.c},
		out:      make(map[int][]copyItem),
		manifest: make(map[int][]fileKey),
		keep:     s.keep.Load(),
	}
	var keys []fileKey
	for _, f := range st.files {
		keys = append(keys, keyOf(me, f))
	}
	if s.a != nil {
		for _, h := range s.copyTargets(me) {
			if s.sent[h] == nil {
				s.sent[h] = make(map[fileKey]bool)
			}
			p.out[h] = []copyItem{}
			p.manifest[h] = keys
			for i, f := range st.files {
				if !s.sent[h][keys[i]] {
					p.out[h] = append(p.out[h], copyItem{key: keys[i], path: f.path})
				}
			}
		}
	}
	for _, src := range s.aRanks {
		if src != me && slices.Contains(s.copyTargets(src), me) {
			p.from = append(p.from, src)
		}
	}
	p.sink = func(src int, k fileKey) (string, error) {
		if _, ok := s.copies.has(k); ok {
			return "", nil
		}
		return s.copies.ensureDir(s, me)
	}
	p.done = func(src int, k fileKey, path string) {
		final := filepath.Join(filepath.Dir(path), k.name())
		if err := os.Rename(path, final); err != nil {
			os.Remove(path)
			return // the manifest check at the end reports it
		}
		s.copies.add(k, final)
	}
	bytes, files, err := s.session(ctx, p)
	if err != nil {
		return fmt.Errorf("kvshuffle: checkpoint %d: copy files to their holders: %w", st.c, err)
	}
	for h, its := range p.out {
		for _, it := range its {
			s.sent[h][it.key] = true
		}
	}
	s.st.copyBytes.Add(uint64(bytes))
	s.st.copyFiles.Add(uint64(files))
	if len(p.out) > 0 || len(p.from) > 0 {
		s.log.Info("checkpoint files copied", "checkpoint", st.c, "files", files, "bytes", bytes,
			"holders", slices.Sorted(maps.Keys(p.out)), "sources", p.from, "took", time.Since(t0))
	}
	return nil
}

// fetch gets the files st.files[i], i in missing, from ranks that hold
// copies, into this rank's spill directory, and points st at them. It is
// collective (most is the largest len(missing) of any rank, agreed
// before): the needs are allgathered, every rank says which it holds, the
// lowest such rank sends.
func (s *Shuffle) fetch(ctx context.Context, st *state, missing []int, most int) error {
	me := s.rank
	width := 2 + 3*most
	words := make([]uint64, width)
	words[0], words[1] = uint64(me), uint64(len(missing))
	for i, fi := range missing {
		k := keyOf(int(st.rank), st.files[fi])
		words[2+3*i] = uint64(k.src)<<32 | uint64(k.crc)
		words[3+3*i] = uint64(k.size)
		words[4+3*i] = k.pairs
	}
	all, err := pgas.Allgather(ctx, s.rt, nil, words)
	if err != nil {
		return err
	}
	type need struct {
		rank int
		key  fileKey
	}
	var needs []need
	var ranks []int
	for x := 0; x+width <= len(all); x += width {
		w := all[x : x+width]
		ranks = append(ranks, int(w[0]))
		for i := range min(int(w[1]), most) {
			k := fileKey{src: uint32(w[2+3*i] >> 32), crc: uint32(w[2+3*i]), size: int64(w[3+3*i]), pairs: w[4+3*i]}
			needs = append(needs, need{int(w[0]), k})
		}
	}
	bw := max((len(needs)+63)/64, 1)
	bits := make([]uint64, bw)
	for i, nd := range needs {
		if path, ok := s.copies.has(nd.key); ok && nd.rank != me {
			if _, err := os.Stat(path); err == nil {
				bits[i/64] |= 1 << (i % 64)
			}
		}
	}
	allBits, err := pgas.Allgather(ctx, s.rt, nil, bits)
	if err != nil {
		return err
	}
	p := &plan{tag: xferTag{op: opFetch, gen: s.gen.Load(), c: st.c}, out: make(map[int][]copyItem)}
	var lost []string
	from := make(map[int]bool)
	for i, nd := range needs {
		provider := -1
		for x, r := range ranks {
			if x*bw+i/64 < len(allBits) && allBits[x*bw+i/64]&(1<<(i%64)) != 0 {
				provider = r
				break
			}
		}
		switch {
		case provider < 0:
			lost = append(lost, fmt.Sprintf("rank %d's %s", nd.rank, nd.key.name()))
		case provider == me:
			path, _ := s.copies.has(nd.key)
			p.out[nd.rank] = append(p.out[nd.rank], copyItem{key: nd.key, path: path})
		case nd.rank == me:
			from[provider] = true
		}
	}
	if len(lost) > 0 {
		return fmt.Errorf("checkpoint %d: spill files unreadable where their rank runs now, and no rank holds a copy: %s (the job's ranks share one host label, so files are kept by reference: run a spare on the same host, or label the hosts with PGAS_HOST): %w",
			st.c, lost, ErrLost)
	}
	p.from = slices.Sorted(maps.Keys(from))
	got := make(map[fileKey]string)
	p.sink = func(int, fileKey) (string, error) {
		if s.a == nil {
			return "", fmt.Errorf("rank %d is no A task: %w", me, ErrState)
		}
		return s.a.spillDir()
	}
	p.done = func(_ int, k fileKey, path string) { got[k] = path }
	t0 := time.Now()
	bytes, files, err := s.session(ctx, p)
	if err != nil {
		for _, path := range got {
			os.Remove(path)
		}
		return fmt.Errorf("checkpoint %d: fetch spill files: %w", st.c, err)
	}
	var fetched int64
	for _, fi := range missing {
		k := keyOf(int(st.rank), st.files[fi])
		path, ok := got[k]
		if !ok {
			return fmt.Errorf("checkpoint %d: %s was not delivered: %w", st.c, k.name(), ErrLost)
		}
		st.files[fi].path = path
		fetched += k.size
	}
	s.st.fetchBytes.Add(uint64(fetched))
	s.st.fetchFiles.Add(uint64(len(missing)))
	if len(missing) > 0 || files > 0 {
		s.log.Info("checkpoint files fetched", "checkpoint", st.c, "fetched_files", len(missing), "fetched_bytes", fetched,
			"served_files", files, "served_bytes", bytes, "took", time.Since(t0))
	}
	return nil
}
