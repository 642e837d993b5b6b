package shm

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A ring is one direction between two processes: a memfd mapped by both,
// written by the producer (the process that created it and dialed) and
// read by the consumer. Layout:
//
//	0    magic    uint64  ringMagic
//	8    version  uint32  ringVersion
//	16   size     uint64  payload-area size, a power of two
//	64   tail     uint64  bytes ever published by the producer
//	128  head     uint64  bytes ever consumed by the consumer
//	196  consumerAsleep uint32
//	260  producerAsleep uint32
//	4096 payload area, size bytes, used modulo size
//
// tail and head only grow; tail-head is the number of bytes in the ring.
// The counters live on separate cache lines so that the two sides do not
// contend. Each side trusts nothing the other wrote: the consumer checks
// that tail-head is within the ring before it reads, and a stale or
// broken peer can at worst fail its own connection.
const (
	ringMagic   = 0x676d68735f697073 // "spi_shmg", little-endian
	ringVersion = 1
	ctlSize     = 4096

	offMagic    = 0
	offVersion  = 8
	offSize     = 16
	offTail     = 64
	offHead     = 128
	offConsIdle = 196
	offProdIdle = 260
)

type ring struct {
	mem  []byte // the whole mapping
	data []byte // the payload area
	mask uint64

	tail, head         *atomic.Uint64
	consIdle, prodIdle *atomic.Uint32
}

func ringAt(mem []byte, size int) *ring {
	r := &ring{mem: mem, data: mem[ctlSize : ctlSize+size], mask: uint64(size - 1)}
	r.tail = (*atomic.Uint64)(unsafe.Pointer(&mem[offTail]))
	r.head = (*atomic.Uint64)(unsafe.Pointer(&mem[offHead]))
	r.consIdle = (*atomic.Uint32)(unsafe.Pointer(&mem[offConsIdle]))
	r.prodIdle = (*atomic.Uint32)(unsafe.Pointer(&mem[offProdIdle]))
	return r
}

// Seals the producer puts on a ring's memfd before it passes it on: the
// consumer maps it for good, and a file that could shrink under a mapping
// would turn the consumer's reads into SIGBUS.
const ringSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newRing creates a ring of size bytes in a fresh sealed memfd and maps it.
// It returns the fd (to pass to the consumer, then close) and the ring.
// A memfd has no name in any file system: nothing is left behind in
// /dev/shm whatever happens to the processes, and the memory is freed when
// the last mapping and descriptor go.
func newRing(size int) (int, *ring, error) {
	fd, err := unix.MemfdCreate("gaspigo-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	fail := func(what string, err error) (int, *ring, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(ctlSize+size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, ringSeals); err != nil {
		return fail("sealing the ring", err)
	}
	mem, err := unix.Mmap(fd, 0, ctlSize+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	binary.LittleEndian.PutUint64(mem[offMagic:], ringMagic)
	binary.LittleEndian.PutUint32(mem[offVersion:], ringVersion)
	binary.LittleEndian.PutUint64(mem[offSize:], uint64(size))
	return fd, ringAt(mem, size), nil
}

// mapRing maps a ring a producer passed over its connection, after
// checking that the file is sealed against resizing and is the size its
// header says, within limits.
func mapRing(fd int) (*ring, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: the ring's file cannot be sealed: %v", ErrCorrupt, err)
	}
	if seals&ringSeals != ringSeals {
		return nil, fmt.Errorf("%w: the ring's file is not sealed against resizing (seals %#x)", ErrCorrupt, seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: fstat of the ring: %w", err)
	}
	size := st.Size - ctlSize
	if size < MinRingSize || size > MaxRingSize || size&(size-1) != 0 {
		return nil, fmt.Errorf("%w: ring file of %d bytes", ErrCorrupt, st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap of the ring: %w", err)
	}
	if binary.LittleEndian.Uint64(mem[offMagic:]) != ringMagic ||
		binary.LittleEndian.Uint32(mem[offVersion:]) != ringVersion ||
		binary.LittleEndian.Uint64(mem[offSize:]) != uint64(size) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w: bad ring header", ErrCorrupt)
	}
	return ringAt(mem, int(size)), nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.data = nil, nil
	}
}

func (r *ring) size() uint64 { return r.mask + 1 }

// put copies b into the payload area at stream position pos.
func (r *ring) put(pos uint64, b []byte) {
	i := pos & r.mask
	n := copy(r.data[i:], b)
	copy(r.data, b[n:])
}

// get copies the payload area at stream position pos into b.
func (r *ring) get(pos uint64, b []byte) {
	i := pos & r.mask
	n := copy(b, r.data[i:])
	copy(b[n:], r.data)
}

// waitFor returns once ready() holds or stop() returns an error (which it
// returns). It polls for spin, yielding to other goroutines, then sleeps
// (sleep, at most nap) with idle set so that the other side knows to wake
// it: the other side makes ready() true, then swaps idle from 1 to 0 and,
// if it did, writes a wake-up byte on the ring's connection, which ends
// the sleep (both atomics are sequentially consistent, so either this side
// sees ready() on its re-check or the other side sees idle). A sleep parks
// the goroutine in Go's network poller and never holds a thread: a futex
// wait would keep the process's only P (GOMAXPROCS=1 ranks) until sysmon
// takes it back. After a sleep, stop() is asked again.
func waitFor(ready func() bool, stop func() error, idle *atomic.Uint32, sleep func(time.Duration), spin, nap time.Duration) error {
	if ready() {
		return nil
	}
	if spin > 0 {
		start := time.Now()
		for i := 0; ; i++ {
			if ready() {
				return nil
			}
			if i&63 == 63 {
				if err := stop(); err != nil {
					return err
				}
				if time.Since(start) >= spin {
					break
				}
			}
			runtime.Gosched()
		}
	}
	for {
		if err := stop(); err != nil {
			return err
		}
		idle.Store(1)
		if ready() {
			idle.Store(0)
			return nil
		}
		sleep(nap)
		idle.Store(0)
		if ready() {
			return nil
		}
	}
}

// signal makes a pending wake-up on ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
