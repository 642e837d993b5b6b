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
//     what it would be waiting on.
//   - Send returns once the payload slice may be reused. It never blocks
//     past ctx; after Close it returns ErrClosed; to a peer whose
//     connection failed it returns an error wrapping ErrPeerDown.
//   - Handler.PeerDown is called at most once per peer connection that
//     fails (a reset, an EOF, a refused dial after retries): strong evidence
//     that the peer died.
//   - Close stops every goroutine the transport started and is idempotent.
//
// The in-memory implementation is transport/mem (N processes in one Go
// process, with a seeded fault hub), the networked one is transport/tcp.
package transport
