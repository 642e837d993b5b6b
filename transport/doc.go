// Package transport moves frames between the processes of a job.
//
// A frame is a fixed 56-byte binary Header followed by an optional raw
// payload of Header.Len bytes. Bulk payload bytes never go through an
// encoder: a sender hands the transport a slice (usually segment memory) and
// a receiver is offered a Payload that it reads straight into its
// destination (usually segment memory).
//
// On a stream, frames are written back to back; an implementation may put
// several frames into one write (transport/tcp batches small ones), which
// changes nothing on the wire.
//
// Contract for every implementation (checked by transport/transporttest):
//
//   - Frames from one process to another are delivered in the order they
//     were sent, each at most once. A lost frame is never skipped silently:
//     the connection fails and Handler.PeerDown is called.
//   - Handler.HandleFrame is called from a goroutine owned by the
//     transport, serially for any one sender and concurrently across
//     senders. It must read or discard the whole payload before returning,
//     and must not block on sending to the same peer (reply through a
//     goroutine of its own), since the transport's reader for that peer is
//     what it would be waiting on. The Header is lent for the call: a
//     handler that keeps it after returning keeps a copy (a transport may
//     reuse it for its next frame).
//   - Send returns once the payload slice and the Header may be reused
//     (a transport keeps neither: it copies what it queues). It never blocks
//     past ctx; after Close it returns ErrClosed; to a peer whose
//     connection failed it returns an error wrapping ErrPeerDown.
//   - Handler.PeerDown is called at most once per peer connection that
//     fails (a reset, an EOF, a refused dial after retries): strong evidence
//     that the peer died.
//   - Close stops every goroutine the transport started and is idempotent.
//
// The in-memory implementation is transport/mem (N processes in one Go
// process, with a seeded fault hub), the networked one is transport/tcp.
//
// # Connections on first use
//
// transport/tcp and transport/shm connect to a peer when the first frame
// goes to it (either end may dial: tcp keeps one connection per pair,
// shm one ring per direction), never at Start, and keep it for the life
// of the process. A process therefore holds connections only to the
// peers it talks to, and a job's start makes no storm of handshakes. The
// runtime (package pgas) talks to few peers: with ranks r and N ranks on
// one host, a barrier (dissemination) talks to r±2^k, k < log2 N; the
// recursive-doubling allreduce (r XOR 2^k), the binomial broadcast and
// the allgather ring (r±1) to a subset of those when N is a power of two
// (a few more otherwise: the fold of the ranks above it); the failure
// detector pings the next health.Config.Successors processes of its ring
// and answers as many behind it (r±1, r±2 by default); checkpoints go to
// the next ckpt.Config.Mirrors ranks. That is about 2·log2 N partners, 23
// at N = 4,096, plus helpers of an indirect probe (health.Config.Helpers)
// while a peer is suspect. Collectives whose members span hosts talk
// between host leaders, and a leader to the members of its host. What the
// program sends itself (Write, Read, passive messages) adds its own
// partners.
//
// # File descriptors
//
// What a process of a job (package job) needs, for P peers it talks to:
//
//   - tcp: its listener, one socket per peer reached over TCP, and one per
//     connection in its handshake (at most internal/admit's MaxPending,
//     512, unauthenticated ones under a flood).
//   - shm: its listener, and one Unix socket per ring: one for each peer
//     it sends to, one for each peer that sends to it (the rings' memfds
//     are closed once mapped: mappings, not descriptors, 2 MiB each by
//     default).
//   - the rest of the process: standard streams, the Go runtime's poller
//     (2), the rendezvous connection to gaspirun, a memfd per shared
//     segment, and in a fault-tolerant job the membership's two listeners
//     and its connections to the voters.
//
// At 4,096 ranks on one host (P ≈ 25-40 with the helpers and the fold),
// that is about 2·P + 20 ≈ 100 descriptors per process, where connecting
// every pair would take 4,095 sockets for TCP and 8,190 for the rings:
// far above the usual soft limit of 1,024 (ulimit -n), and 4,096 × 4,095
// handshakes at start. On several hosts the peers on other hosts take one
// TCP socket each instead of two ring sockets. Measured with gaspirun and
// apps/kmeans (fault-tolerant, rings on) on one host: 64 processes held
// 43-45 descriptors (32-34 sockets) each at most over the run, except the
// five Raft voters (143-162 sockets: the Raft leader's fan-out to every
// process, package spares, is the one count that grows with N).
package transport
