// Package tcp is the networked transport.Transport: one authenticated TCP
// connection per pair of processes, carrying frames (a 56-byte header, then
// the raw payload).
//
// Usage:
//
//	cfg := tcp.LocalConfig()
//	cfg.Self, cfg.Token = self, token // token from auth.NewToken, shared by the job
//	tr, err := tcp.New(cfg)           // binds the listener; publish tr.Addr()
//	if err != nil { ... }
//	defer tr.Close()
//	if err := tr.SetPeers(addrs); err != nil { ... } // Proc -> "host:port", from the launcher
//	if err := tr.Start(handler); err != nil { ... }
//	h := transport.Header{Type: transport.FrameWrite, Seg: 1, Off: off}
//	err = tr.Send(ctx, peer, &h, seg.Slice(off, n))
//
// # Connections
//
// A connection is made when it is first needed: the first Send to a peer
// that is not connected dials it, in the background, with exponential
// backoff (Config.Dial*), and waits for it, bounded by its ctx (the dial
// goes on when ctx ends first, for the next Send). Nothing is dialed at
// Start or SetPeers, so a process holds connections only to the peers it
// talks to, and starting N processes makes no storm of N(N-1)/2
// handshakes. Either process of a pair may dial; one connection carries
// the frames of both directions.
//
// A process that joins the job after it formed gets a new Proc (ids are
// never reused) and is added with AddPeer (transport.PeerAdder; the
// runtime calls it with the addresses its membership's views list),
// after which it is dialed on first use like any peer. Its own dials are
// accepted before that, as any authenticated process's are.
//
// Every connection runs the job-token handshake (internal/auth, purpose
// "data") before a single frame is read; it also tells the acceptor which
// Proc dialed. The acceptor then writes one verdict byte, which the dialer
// reads before it takes the connection as established and before it
// writes any frame:
//
//   - accept: the dialer writes the same byte back to confirm, then takes
//     the connection as the pair's; the acceptor does once it has read the
//     confirmation. A dialer whose handshake ran out of time (a starved
//     process on an overloaded host) closes the connection unconfirmed and
//     dials again: the acceptor drops the unconfirmed one quietly (or when
//     the new dial arrives, since a dialer has one attempt at a time), and
//     neither end reports PeerDown. Sends of the acceptor wait meanwhile.
//   - crossed: both processes dialed each other at once. The rule: the
//     connection dialed by the lower Proc is kept. An acceptor turns a
//     dial away when it holds a connection it dialed itself to that peer,
//     or when it is dialing that peer and is the lower of the two; the
//     higher one accepts the lower's dial even while its own is under
//     way, and its own is then turned away. The dialer closes the
//     connection it was turned away on, and its waiting Sends use the
//     kept one. No frame was written on the closed one, so nothing is
//     lost or reordered; neither side counts it as a refusal or reports
//     PeerDown (Stats.DialsCrossed counts them).
//   - refused: the connection breaks the rules (a second one from a Proc
//     already connected by its own dial); the dialer retries within
//     DialMaxElapsed.
//   - down: the acceptor holds the dialer down for good (a Proc is never
//     reused); the dialer gives up at once and reports the peer down.
//
// A connection that fails the handshake, or that is refused, is closed,
// logged with its remote address, and counted in Stats.HandshakesRefused;
// a refusal never produces PeerDown. Refusals are logged one by one only
// within bounds (a few per 10 s, and the first from each source); the rest
// are summarised in one line per 10 s.
//
// Unauthenticated connections are bounded: every accepted connection enters
// the process's admission gate (internal/admit), shared with the other
// listeners of the process, which holds at most a fixed number pending in
// all and per source address and, when full, sheds (closes) the OLDEST
// pending one. A peer's handshake takes about a millisecond, so a flood of
// held or churned connections cannot keep it out, nor exhaust the
// process's file descriptors. Stats.HandshakesShed, HandshakesTimedOut and
// HandshakesAccepted count what the gate did. The acceptor proves the token
// only after the dialer has, so a connection is never shed after its dialer
// saw the handshake succeed.
//
// With Config.TLS, every connection runs mutual TLS 1.3 (internal/auth)
// once its handshake has succeeded, under the same HandshakeTimeout, and
// carries its frames inside it. The socket options are set on the TCP
// socket under it; a frame of up to 16 KiB goes out as one TLS record
// (header and payload copied together, where plain TCP uses one writev); a
// Send whose ctx ends mid-frame still returns at once and leaves the
// stream intact, its remaining TLS records written in the background; and
// PollSpin does not apply (reads go through TLS).
//
// When an established connection fails (EOF, reset, write error, a
// malformed frame) or a dial gives up (after DialMaxElapsed, after three
// connects refused in a row: every listener is bound before its address
// is published, so nothing listening there means the process is gone, or
// at once on a "down" verdict), the peer is down: Handler.PeerDown is
// called exactly once for it, from a goroutine of the transport, and every
// later Send to it returns a *PeerDownError, which wraps
// transport.ErrPeerDown. A failed connection is never made again: a
// process is never restarted under the same Proc. A peer this process
// never talks to produces no PeerDown here, whatever happens to it; the
// failure detector owns that case.
//
// A connection that carried no frame either way for Config.IdleTimeout
// (DefaultIdleTimeout, 2 minutes) is closed by both ends with a handshake
// of FrameLink frames that no Handler sees (idle.go): no frame is lost,
// duplicated or reordered, neither end reports PeerDown, Stats.IdleClosed
// counts it, and the next Send dials the peer again.
//
// # Cost as a function of N
//
// Per peer known (SetPeers, AddPeer): one small record (address, state), no
// goroutine, no buffer. Per connected peer: one socket, a read buffer of
// Config.ReadBufferSize, a batch of up to BatchBytes, a reader and a batch
// writer goroutine. A process of the runtime (package pgas) talks to
// O(log N) peers: see transport's package doc for the count and the file
// descriptors a process needs.
//
// # Frames
//
// Small frames are batched (Config.BatchFrame, BatchBytes): Send copies a
// frame of at most BatchFrame bytes (header included) into the
// connection's batch and returns at once; the connection's writer
// goroutine, woken when the batch becomes non-empty, takes the write
// token and writes everything batched with one system call. A window of
// small writes and notifications, and the acknowledgement coming back,
// thus cost one write each way rather than one per frame; a lone frame
// costs one goroutine hand-off. The frames on the wire are unchanged:
// a batch is frames back to back. Queue is the non-blocking form (false
// when it cannot batch), for handlers that answer from the reader.
//
// Any other Send encodes the header and writes the batch, then header and
// payload, with one writev, straight from the caller's slice, under the
// connection's write token, so frames from concurrent senders never
// interleave and frames leave in the order their Sends batched or wrote
// them. A Send that would overfill the batch writes it the same way.
// Waiting for the token and the write itself honour ctx. When ctx ends while part of a frame is
// on the wire, the unwritten tail is copied and finished in the background
// and Send returns the ctx error: a timeout never breaks the stream and is
// never reported as a death.
//
// Each connection has one reader goroutine with a bufio.Reader of
// Config.ReadBufferSize bytes. It decodes and checks the header (Len is
// capped by transport.MaxPayload before anything else happens), overwrites
// Src with the authenticated peer, and calls Handler.HandleFrame with a
// Payload whose ReadInto reads straight from the stream into the
// destination. Whatever the handler leaves unread is discarded. The Header
// passed to HandleFrame is a fresh copy the handler may keep; the Payload is
// valid only during the call.
//
// Before a read that goes to the socket (the read buffer is empty), the
// reader yields (runtime.Gosched), so that what the frames it just handed
// over woke, a batch writer with the reply or the caller waiting for them,
// runs ahead of that read's system call, which usually finds nothing and
// parks. With one P per process (gaspirun's GOMAXPROCS on 2 cores) that
// takes a system call off each side of a round trip.
//
// With Config.PollSpin > 0 the reader polls its socket with non-blocking
// reads for that long before it parks in the network poller, yielding to
// the process's goroutines (not the CPU) between attempts: a frame then
// lands in a running reader, with no wake-up through the kernel and the
// scheduler, and the goroutine it completes runs next on the same P. Both
// ends poll: the dialed socket and the accepted one (rawSocket finds the
// file descriptor under the transport's own wrapper, never under a
// wrapper it does not know, such as a fault injector's). It is for hosts
// with a CPU per process (package job turns it on there, PGAS_TCP_SPIN).
// Measured on the 2-core development host with 2 processes (bench/mpi,
// bench/RESULTS.md): 8-byte round trip 54 to 15 us, barrier 32 to 12 us,
// against Open MPI TCP's 22 and 13 us in the same run. An earlier version
// gave the CPU away between attempts (sched_yield) and polled only on the
// dialed end; the yielded CPU came back tens of microseconds late and the
// other end still slept, so it gained little. Spinning belongs here
// rather than in the runtime's waits (pgas SpinWait): with one P, a
// goroutine spinning on a channel keeps the scheduler from polling the
// network at all.
//
// A small frame that must leave is written by its caller when the
// connection is idle (its write token free), with the batch before it,
// with one non-blocking write (conn.writeNow): no goroutine between the
// caller and the socket, as with Queue from the reader (an acknowledgement
// answered where the request was read). What the socket does not take at
// once goes to the connection's writer ahead of anything queued since, so
// the order of frames is that of their Sends, and a caller never blocks on
// a peer that stopped reading. A write in progress (the token held) still
// gets the frame queued behind it, which is how a stream of small frames
// leaves in batches. A frame sent with SendLater (for package pgas, a
// write without a notification) is only queued: it leaves with the next
// small frame that must (the Wait's request for acknowledgement, a
// notification), or after Config.Linger (50 us) if none comes, so that a
// window of 64 small writes costs one system call, not 64 (a write per
// frame cut the 8-byte message rate to a quarter; bench/RESULTS.md).
//
// # Concurrency and ownership
//
// Send, Queue, SetPeers, AddPeer, Stats and Close may be called from any
// goroutine. The transport owns: its listener (internal/listen: the
// accept loop, one goroutine per connection being authenticated, which
// then reads it), one dialer per peer a Send
// waits for, until it connects or gives up, one batch writer per connection (it ends with the
// connection), and a writer finishing a frame whose Send timed out. Close
// writes what is still batched (for at most 200 ms), then stops all of
// them and waits, including a HandleFrame or PeerDown call in progress, so
// a handler must not call Close. The transport owns cfg.Listener once New
// returns.
//
// Lock order: Transport.mu and a connection's batch lock are leaves: never
// held together, nor while calling the handler, writing to or reading
// from a socket, or waiting for the write token. The write token of a connection is taken before Transport.mu when
// both are needed.
package tcp
