package shm

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// FetchMemory brings a peer's memfd over the authenticated socket: the
// requester maps the very memory the owner maps (a store on one side is
// seen on the other), with the owner's tag; the owner's function learns
// who asked and for what; a refusal, a peer that shares nothing and a
// peer of another job are errors, and nothing leaks.
func TestFetchMemory(t *testing.T) {
	ts, _ := startCluster(t, 3)
	owner, asker := ts[0], ts[1]
	fd, err := unix.MemfdCreate("test-mem", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("no memfd: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	mine, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mine)
	type ask struct {
		from transport.Proc
		key  uint64
	}
	asked := make(chan ask, 4)
	ctx := transporttest.Context(t, transporttest.Timeout)
	if _, _, err := asker.FetchMemory(ctx, 0, 7); err == nil {
		t.Fatal("a peer that shares no memory yet answered a request")
	}
	owner.ShareMemory(func(from transport.Proc, key uint64) (int, uint64, error) {
		asked <- ask{from, key}
		if key != 7 {
			return -1, 0, errors.New("no such memory")
		}
		dup, err := unix.Dup(fd)
		return dup, 42, err
	})
	got, tag, err := asker.FetchMemory(ctx, 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	if a := <-asked; a != (ask{1, 7}) || tag != 42 {
		t.Fatalf("the owner was asked %+v and answered tag %d, want proc 1, key 7, tag 42", a, tag)
	}
	theirs, err := unix.Mmap(got, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	unix.Close(got)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(theirs)
	copy(theirs[100:], "from the asker")
	if string(mine[100:114]) != "from the asker" {
		t.Fatalf("the owner's memory holds %q after the asker's store", mine[100:114])
	}
	if _, _, err := asker.FetchMemory(ctx, 0, 8); err == nil {
		t.Fatal("a refused request returned memory")
	} else if a := <-asked; a.key != 8 {
		t.Fatalf("the owner was asked for %d, want 8", a.key)
	}
	// A process with another job's token gets nothing.
	cfg := DefaultConfig()
	cfg.Self, cfg.Token, cfg.RingSize = 2, auth.NewToken(), MinRingSize
	stranger, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	if err := stranger.SetPeers(map[transport.Proc]string{0: owner.Addr(), 2: stranger.Addr()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stranger.FetchMemory(ctx, 0, 7); !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("a foreign token's request: %v, want ErrAuth", err)
	}
	select {
	case a := <-asked:
		t.Fatalf("the owner's function was asked %+v by a process that failed the handshake", a)
	default:
	}
}
