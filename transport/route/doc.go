// Package route is a transport.Transport that sends to each peer through
// one of two others: Near for the peers on this host (transport/shm),
// Far for the rest (transport/tcp). The composition root (package job)
// builds it from the member table's host labels (PGAS_HOST).
//
// Contract, on top of package transport's:
//
//   - Frames from this process to a peer go through one transport at a
//     time, so they stay in order. A peer starts on Near if it was named
//     near; when Near's first connection to it fails with an error that
//     Config.Fallback accepts (transport.ErrNoPath, as transport/shm's: the peer is in another
//     network namespace, or refused the shared-memory handshake), the peer
//     moves to Far for good and the frame is sent there. Nothing was sent
//     on Near, so nothing is duplicated or lost.
//   - Frames from both transports reach the one Handler; PeerDown from
//     either is passed on, except Near's for a peer that moved to Far
//     because of such an error.
//   - Disconnect and Close act on both transports; Connected
//     (transport.Connector) holds when either is connected to the peer.
//   - A process that joined the job after the router started is added
//     with AddPeer (transport.PeerAdder), which passes it to Far: it is
//     never near, and shares no memory with this process.
package route
