// Package health is the heartbeat failure detector. It produces the local
// half of the error-state vector: which processes this one suspects, and
// which failures it has confirmed for the membership leader.
//
// # Protocol
//
// The members of the committed view form a ring (in the order given, the
// same on every process). Each process pings its R live ring successors
// every heartbeat interval and answers the pings of its R predecessors, so
// it sends about 2R messages per interval whatever the job size.
//
//   - A successor that sends no Ack for the suspicion timeout, or whose
//     connection closes (PeerDown: strong evidence), becomes Suspected.
//   - The observer then asks up to P helpers (the suspect's other ring
//     monitors first, then its ring neighbours, chosen deterministically and
//     rotated on each new round) to probe the suspect (PingReq). A helper
//     pings it (again every interval, in case a ping is lost) and answers
//     IndirectAck if it answers, or IndirectNack after the probe timeout or
//     at once when its own connection to the suspect is down.
//   - One Ack, direct or indirect, refutes the suspicion. The suspicion is
//     Confirmed only when C distinct helpers report a Nack: never on the
//     observer's word alone, so an observer cut off from everybody, which
//     hears no Nacks, cannot condemn anyone.
//   - A Hint (a timed-out collective) is weak evidence: a process that is
//     not already monitored is watched until it answers, and only silence
//     for the whole suspicion timeout makes it suspected. A Hint never
//     confirms by itself.
//   - Lifeguard-style local health (localhealth.go): a process that is
//     itself slow does not accuse others on that evidence. Its score rises
//     (up to MaxLocalHealth) when its own clock stalls (the driver reports
//     the lateness of its ticks: the process was stopped, descheduled or
//     its timers fired late), when helpers fail to answer at all, when a
//     suspicion it raised on timing turns out wrong, and when a peer's Ack
//     comes more than two intervals later than that peer's quickest (a
//     burst after the peer, or the host, stalled). Its suspicion, probe
//     and round timeouts scale by 1+score; the score falls by one per
//     stretched suspicion timeout without such a signal. After its own
//     stall a process catches up before it accuses anyone: no suspicion on
//     timing and no Nack as a helper until a message reaches it again (or
//     a stretched suspicion timeout passes), then every peer has a fresh
//     ping to answer, every probe a full probe timeout, and every open
//     suspicion a new round whose answers alone count.
//
// Few members: C is capped at the number of live members other than the
// observer and the suspect (members−2). With nobody left to ask (two
// processes, or all others confirmed), a suspicion is confirmed only by
// strong evidence: a PeerDown followed by the suspicion timeout without an
// Ack. A silent peer is then suspected but never confirmed, because with
// two processes a partition cannot be told from a death. More generally, f
// simultaneous silent failures are all confirmed only if at least C live
// helpers remain for each; otherwise the suspicions stay open (and
// visible through Suspects) until the view changes.
//
// A side of a partition with at least C+1 processes can confirm the
// processes it cannot reach: that is what the membership's quorum decides
// on. A process alone (or with fewer than C others) can confirm nobody.
//
// Lifeguard's two other extensions have counterparts here. Its dogpile
// (a suspicion timeout that shrinks as independent suspicions arrive) is
// not needed: nothing is confirmed on timers alone, only on C independent
// helpers' Nacks (bar the two-process fallback). Its buddy system (telling
// the suspect it is suspected, so it refutes at once) is the observer's
// direct ping of a suspect every interval: its first fresh Ack refutes.
//
// # Cost as a function of N
//
// At rest each process sends R pings and R Acks per HeartbeatInterval, and
// receives as many: 2R messages of MessageSize (16) bytes, whatever N (the
// ring gives each process R successors and R predecessors; see
// TestMessagesPerInterval). With DefaultConfig (R=2, 100 ms) that is 40
// messages per second sent and 40 received per process, 40·N for the job.
// The driver also wakes once per Tick (100 times a second by default),
// which on a host with many processes is the larger cost: 512 processes
// wake 51,200 times a second. A process keeps state only for the members
// it monitors, watches, suspects, has confirmed or saw go down (O(R) at
// rest), shares the member list it is given (the runtime's views are
// shared), and applies a new view in O(N) comparisons to check the list
// plus O(R + peers with state): no table of N entries is built when the
// list is in ascending order, as the runtime's is.
//
// A failure is confirmed in one round: each of the suspect's R monitors
// asks P helpers (R·P PingReqs), each helper pings the suspect every
// interval until the probe timeout (about ProbeTimeout/HeartbeatInterval
// pings) and answers once: O(R·P·ProbeTimeout/HeartbeatInterval)
// messages in all, about 36 by default, whatever N. A further round, with
// P other helpers, follows only when fewer than C helpers answered. A
// silent failure takes SuspicionTimeout + ProbeTimeout + three hops
// (1.95 s by default), a SIGKILL ProbeTimeout + three hops at most (about
// two hops when the helpers saw the connection close too); see
// Config.DetectionBound.
//
// Local health costs no message; it costs time when the score is up: at
// score h the two timeouts are (1+h) times longer (with the default cap
// of 3, a silent failure may take about 7.6 s). On a quiet machine the
// score stays 0 and detection is unchanged: in fake time (64 processes,
// 120 failures, TestQuietDetectionLatency) a SIGKILL is confirmed after
// 3 ticks and a silent failure after 182 to 191 ticks (1.86 s median)
// with and without it. On a simulated host that stops its processes about
// half of the time, in stalls of up to 1.2 times the silent detection
// time (TestStarvedHost, 512 processes), no healthy process is declared
// failed, where 142 to 192 were without it; a SIGKILL there is confirmed
// within 163 ticks, but a silent failure only once the load eases. With
// rarer stalls of the same length (-sim.starve.q=0.002), a process that
// stops for longer than the silent detection time while the processes
// around it run on time is still confirmed (1 to 4 of 128 in some seeds,
// 29 to 34 without local health): it cannot be told from a SIGSTOP.
//
// # Use
//
// The Detector is the runtime's entry point:
//
//	d, err := health.New(health.DefaultConfig(), self, members, sender, logger)
//	if err != nil { ... }
//	defer d.Close()
//	events := d.Subscribe()
//	// transport handler: FrameHeartbeat payloads go to d.Deliver(from, payload),
//	// Handler.PeerDown to d.PeerDown(p); a timed-out collective calls d.Hint(p);
//	// a newly committed view calls d.SetMembers(view).
//	for ev := range events {
//		if ev.Kind == health.Confirmed {
//			// propose DeclareFailed(ev.Proc) to the membership leader
//		}
//	}
//
// The Core is the same protocol as a pure state machine with abstract
// ticks, for tests and simulations: call Tick, Receive, PeerDown, Hint and
// SetMembers (and Late before a Tick, when the driver's clock skipped
// ticks), then Ready to take the messages to send and the events.
//
// # Concurrency and ownership
//
// A Core is not safe for concurrent use. A Detector is: its methods may be
// called from any goroutine. It owns one tick goroutine and one sender
// goroutine per destination it has sent to; Close stops and waits for all
// of them and is idempotent. Input methods (Deliver, PeerDown, Hint,
// SetMembers) take the Detector's mutex, run the Core and queue its output
// without blocking: a destination whose queue (Config.SendQueue) is full
// loses the message (counted), and a subscriber whose channel is full loses
// the event (counted). Sender.SendHealth is called only from sender
// goroutines, never with the mutex held, so it may call back into the
// Detector (for example Deliver on an in-memory network).
//
// Lock order: Detector.mu is the only lock; nothing is called with it held
// that takes another lock of this package or calls out of it, apart from
// the logger.
package health
