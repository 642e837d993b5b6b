// Package shm is a transport.Transport between processes of one host:
// frames go through rings in shared memory instead of TCP loopback.
//
// # Rings
//
// Each ordered pair of processes that talk has a ring, made by the first
// Send over it (never at Start, so a process holds rings only with the
// peers it talks to: see package transport for the count): a memfd (an
// anonymous file with no name in any file system) that the sending process
// creates, seals against resizing, maps, and passes to the receiving
// process over an abstract Unix socket (SCM_RIGHTS) after both have proved
// that they know the job token (internal/auth, purpose "shm"). The
// receiver acknowledges the ring and the sender confirms the
// acknowledgement; only then is the ring established at either end, so a
// set-up that runs out of time at one end (a starved process on an
// overloaded host) is given up at both without a failure. A frame is
// the 56-byte header followed by its payload, copied into the ring; the
// receiver delivers it to the Handler as TCP does, reading the payload
// straight from the ring into its destination. A frame that fits the ring
// is published whole; a larger one streams through. The header layout and
// every contract of package transport hold (transport/transporttest).
//
// Nothing is ever created in /dev/shm or any other directory: memfds and
// abstract sockets vanish with the last process that holds them, so a
// SIGKILLed process leaks nothing.
//
// # Waiting
//
// A receiver that finds its ring empty, and a sender that finds it full,
// polls for Config.Spin (yielding to the process's other goroutines),
// then announces that it sleeps in a word of the shared mapping and parks
// its goroutine; the other side, seeing the word, writes one wake-up byte
// on the ring's Unix connection, whose reader goroutine wakes the sleeper.
// The fast path makes no system call. Sleeping in Go's network poller
// rather than on a futex matters: a futex wait holds its thread, and a
// rank with GOMAXPROCS=1 runs nothing else until the runtime takes the P
// back (tens of microseconds to milliseconds). Spinning costs a core: keep
// it short (or 0) when a host runs more ranks than it has cores.
//
// # Failures and fencing
//
// Each ring's Unix connection stays open and carries only wake-up bytes: its end
// (the peer closed, or died and its kernel closed its sockets) is the
// peer's failure, reported once with Handler.PeerDown, like a TCP reset.
// The two processes trust nothing in the shared control words: the
// receiver checks every index and header, and a broken or stale peer can
// only fail its own connection. Disconnect (transport.Disconnector) fails a
// peer for good and unmaps its rings here, so that a process that was
// replaced while stopped (SIGSTOP) and resumes writes into memory no
// survivor reads; its frames also carry its old epoch, which the runtime
// refuses.
//
// # Addresses
//
// New listens on a random abstract socket name (Addr, starting with '@'),
// which the launcher's member table carries to the other processes. The
// name lives in the kernel's network namespace: a process in another
// namespace (another host, or a simulated one) cannot reach it, and the
// first Send to it fails with an error wrapping ErrNoPath, which a router
// (transport/route) takes as "use TCP for this peer".
//
// The transport needs Linux (memfd_create, file seals, SCM_RIGHTS);
// elsewhere New returns ErrUnsupported.
package shm
