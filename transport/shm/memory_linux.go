package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// Memory requests (transport.MemorySharer). A process that wants a peer's
// memory dials the peer's socket as for a ring, proves the job token, and
// sends a request of offerSize bytes: magic "memq", version, key. The peer
// answers with one reply of replySize bytes: magic "memr", status (0: the
// memory is attached as SCM_RIGHTS; 1: refused), the tag. The connection
// then closes: it carries nothing else.

const (
	memqMagic = 0x6d656d71 // "memq"
	memrMagic = 0x6d656d72 // "memr"
	replySize = 16
)

// errRefused is FetchMemory's error when the peer refused the request.
var errRefused = errors.New("the peer refused the request")

// ShareMemory sets the function that answers the peers' memory requests
// (transport.MemorySharer).
func (t *Transport) ShareMemory(f transport.MemoryFunc) { t.memFunc.Store(&f) }

// FetchMemory asks peer for its memory named key (transport.MemorySharer).
func (t *Transport) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	p := t.peer(peer)
	if p == nil {
		return -1, 0, fmt.Errorf("shm: fetch memory from proc %d: %w", peer, transport.ErrUnknownPeer)
	}
	d := net.Dialer{Timeout: t.handshake()}
	nc, err := d.DialContext(ctx, "unix", p.addr)
	if err != nil {
		return -1, 0, &noPathError{p.id, p.addr, err}
	}
	c := nc.(*net.UnixConn)
	if !t.track(c) {
		c.Close()
		return -1, 0, transport.ErrClosed
	}
	defer func() {
		t.untrack(c)
		c.Close()
	}()
	deadline := time.Now().Add(t.handshake())
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	fd, tag, err := t.askMemory(c, p, key)
	if err != nil {
		return -1, 0, fmt.Errorf("shm: fetch memory %d from proc %d: %w", key, peer, err)
	}
	return fd, tag, nil
}

func (t *Transport) askMemory(c *net.UnixConn, p *peer, key uint64) (int, uint64, error) {
	got, err := auth.Handshake(c, t.cfg.Token, auth.PurposeShm, uint32(t.self), true)
	if err != nil {
		return -1, 0, fmt.Errorf("%w: %w", transport.ErrAuth, err)
	}
	if transport.Proc(got) != p.id {
		return -1, 0, fmt.Errorf("%w: %s answered as proc %d", transport.ErrAuth, p.addr, got)
	}
	var req [offerSize]byte
	binary.LittleEndian.PutUint32(req[0:], memqMagic)
	binary.LittleEndian.PutUint32(req[4:], ringVersion)
	binary.LittleEndian.PutUint64(req[8:], key)
	if _, err := c.Write(req[:]); err != nil {
		return -1, 0, err
	}
	var msg [replySize]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(msg[:], oob)
	if err != nil {
		return -1, 0, err
	}
	fds := rightsOf(oob[:oobn])
	if n != replySize || binary.LittleEndian.Uint32(msg[0:]) != memrMagic {
		closeAll(fds)
		return -1, 0, fmt.Errorf("%w: a bad reply (%d bytes)", ErrCorrupt, n)
	}
	if binary.LittleEndian.Uint32(msg[4:]) != 0 {
		closeAll(fds)
		return -1, 0, errRefused
	}
	if len(fds) != 1 {
		closeAll(fds)
		return -1, 0, fmt.Errorf("%w: a reply with %d descriptors", ErrCorrupt, len(fds))
	}
	return fds[0], binary.LittleEndian.Uint64(msg[8:]), nil
}

// serveMemory answers id's request for the memory named key on c, whose
// handshake is done, and closes c.
func (t *Transport) serveMemory(c *net.UnixConn, id transport.Proc, key uint64) {
	defer c.Close()
	var msg [replySize]byte
	binary.LittleEndian.PutUint32(msg[0:], memrMagic)
	binary.LittleEndian.PutUint32(msg[4:], 1)
	fd, tag, err := -1, uint64(0), errRefused
	if f := t.memFunc.Load(); f != nil {
		fd, tag, err = (*f)(id, key)
	}
	var oob []byte
	if err == nil {
		binary.LittleEndian.PutUint32(msg[4:], 0)
		binary.LittleEndian.PutUint64(msg[8:], tag)
		oob = unix.UnixRights(fd)
		defer unix.Close(fd)
	} else {
		t.log.Debug("shm: memory request refused", "peer", uint32(id), "key", key, "err", err)
	}
	if _, _, werr := c.WriteMsgUnix(msg[:], oob, nil); werr != nil && !t.isClosed() {
		t.log.Debug("shm: memory reply not sent", "peer", uint32(id), "key", key, "err", werr)
	}
}

// rightsOf returns the descriptors that oob (a message's control data)
// carries.
func rightsOf(oob []byte) []int {
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for i := range cmsgs {
			if got, err := unix.ParseUnixRights(&cmsgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
