// Package admit bounds the connections a process holds before they have
// authenticated, on every listener it owns (the data plane of
// transport/tcp, the rendezvous server, the Raft stream and the control
// RPC of spares), and rate-limits the log lines their refusals produce.
//
// # Admission
//
// A Gate holds the pending (not yet authenticated) connections of one
// process, at most Limits.MaxPending in all and Limits.MaxPerSource from one
// source address. When a new connection would exceed either bound, the
// OLDEST pending connection (of that source, or of all) is shed: closed at
// once, so its handshake fails and its goroutine ends. The newest
// connection is always admitted. A real peer's handshake completes in about
// a millisecond, so under a flood of connections that are held open or
// churned it is the flood's connections that are shed, never the peer's:
// refusing the newest instead would refuse the peer's dials for as long as
// the flood lasts. Connections whose remote end has sent a valid hello
// (Pending.Greeted; a real peer does so at once, an idle flood connection
// never) are shed only after every silent one, so even a flood fast
// enough to turn the whole gate over within one handshake, on a loaded
// machine, cannot displace a peer that greeted. A source is the remote IP
// address; on one host the flood
// and the job's own processes share 127.0.0.1, so the per-source bound
// alone cannot tell them apart, and shedding the oldest is what lets the
// peers through. The bounds also cap the file descriptors a flood can take:
// at most MaxPending per process, whatever the number of listeners.
//
// Each listener opens a Door on the process's gate (Shared, or a Gate of its
// own) with its name and logger; internal/listen, the one listener of the
// code base, does this for every listener. Its accept loop calls Door.Admit for every
// accepted connection, runs the handshake under a short deadline, then
// calls Pending.Done (or passes Pending.Greeted and Pending.Admit to
// auth.Accept as its hooks), and reports the outcome with Door.Authenticated or
// Door.Refuse. Done tells whether the connection was shed meanwhile: a shed
// connection is counted (Stats.Shed) and never logged one by one.
//
// # Logging refusals
//
// Refusals are counted always and logged within bounds: each is logged on
// its own while fewer than LogBurst have been in the current interval (so a
// handful of stray clients is reported line by line, with their addresses),
// and so is the first refusal from a source not seen before (up to a bounded
// number of sources). The rest are counted, and one summary line per
// interval says how many were refused from how many sources. A flood of
// thousands of connections therefore costs a few lines per LogInterval.
//
// # Concurrency
//
// All methods are safe for concurrent use. Gate.mu and Door.mu are leaves
// (Door.mu is never held while taking Gate.mu, nor the reverse); shed
// connections are closed and log lines written with no lock held. The only
// goroutine is the summary timer (time.AfterFunc), which Door.Close stops
// after writing the last summary.
package admit
