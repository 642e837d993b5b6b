// Package mem is an in-process transport.Transport: n endpoints (procs
// 0..n-1, and more added later) of one Network exchange frames over
// channels, with a seeded fault hub on every link. It is what unit tests
// and large simulations (thousands of procs in one Go process) run on,
// and it works inside testing/synctest bubbles: it uses only channels,
// timers and goroutines.
//
// Usage:
//
//	nw := mem.NewNetwork(4, mem.LocalConfig())
//	defer nw.Close()
//	for p := range transport.Proc(4) {
//		_ = nw.Endpoint(p).Start(handlers[p])
//	}
//	h := transport.Header{Type: transport.FramePassive}
//	err := nw.Endpoint(0).Send(ctx, 1, &h, msg)
//
//	nw.Partition([]transport.Proc{0, 1}, []transport.Proc{2, 3}) // silent split
//	nw.Heal()
//	nw.Drop(mem.Any, 3, 0.01) // 1% of frames into 3 lost; each loss breaks its connection
//	nw.Delay(mem.Any, mem.Any, time.Millisecond, 5*time.Millisecond)
//	nw.Kill(2)
//	t.Logf("seed %d", nw.Seed()) // print on failure to replay
//
// # Model
//
// Two procs share one connection, created on the first Send between them.
// It has two directed links; each link has a bounded queue (Config.QueueLen
// frames) and one delivery goroutine, started on the link's first Send, that
// calls the receiver's HandleFrame frame by frame, so frames on a link keep
// their order and handlers run serially per sender. Send copies the payload
// into the frame and returns once it is queued; a full queue blocks Send
// until there is room or ctx ends (backpressure, like a socket buffer).
//
// A connection fails when either end is killed or closed, or when the fault
// hub drops a frame on it. Failing is permanent: both directions stop,
// frames queued on them are lost, each live end that has started gets
// Handler.PeerDown once (after the last HandleFrame from that peer has
// returned), and later Sends between the two return a *PeerError wrapping
// transport.ErrPeerDown. An endpoint that had no connection to a dead proc
// learns on its first Send to it, which fails and triggers PeerDown. An
// endpoint that is not started yet gets its PeerDown calls on Start.
//
// A process that joins the job after it formed gets an endpoint of its
// own, with the next Proc (Network.AddEndpoint). As over TCP, where its
// address reaches the others through the membership's views, the other
// endpoints send to it only once they were given its address
// (Transport.AddPeer with its Addr, transport.PeerAdder) or it connected
// to them first; it knows the network's first endpoints from the start.
//
// # Fault hub
//
// Each frame passes, on its link's delivery goroutine: Delay (wait until
// send time + d + seeded jitter), partition (wait while the ends are in
// different groups), Drop (seeded coin), BeforeFrame hook (deliver, drop or
// hold), HandleFrame, AfterFrame hook. Random decisions come from
// math/rand/v2 PCG streams, one per link and per purpose, seeded from
// (Config.Seed, from, to): the k-th frame on a link meets the same decision
// in every run with that seed, whatever the goroutine schedule. A
// partition is silent: nobody gets PeerDown, and Sends across it block once
// the queue is full, as on a real network.
//
// # Concurrency and ownership
//
// All methods are safe for concurrent use. One mutex, Network.mu, guards
// the topology (endpoint state, connections); it is never held while a
// Handler or hook runs, so handlers and hooks may call Send, Kill,
// Partition, Heal, Drop and Delay. The fault configuration is an immutable
// snapshot read without locking. The delivery goroutine of a link belongs
// to the receiving endpoint, as do its pending PeerDown calls: Transport.Close
// waits for them (including a HandleFrame in progress), so no Handler call
// happens after Close returns; do not call Close from the endpoint's own
// Handler. Kill does not wait. Network.Close stops everything and waits for
// every goroutine the network started.
package mem
