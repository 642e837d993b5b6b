package spares

import "time"

// The cut-off rule. A process that hears from no membership quorum for
// longer than Config.CutOff gives up (ErrCutOff, exit code
// job.ExitCutOff), so that no process of a job runs forever on a host cut
// off from the others. Before
// that, while it has no contact, it asks the processes it knows of (the
// voters first) for its standing, so that a process that was replaced
// while cut off learns it as soon as it reaches any of them, and exits
// fenced (job.ExitDeclaredFailed) long before the bound.
//
// "Contact" is first what Raft gives: a leader is in contact
// (hashicorp/raft steps a leader down after LeaderLeaseTimeout without a
// quorum), any other node is in contact while its last message from a
// leader is at most HeartbeatTimeout old. A client of the voters-only
// mode runs no Raft: it is in contact while the news from the tree is
// fresh, that is while its parent's last answer put the freshest contact
// of its ancestors with the quorum at most treeFresh ago (the driver
// passes that window in contactObs.Window). On a starved host Raft may go
// without a leader for seconds while every process still reaches the
// others; so a round of standing questions answered by a majority of the
// voters this process knows (itself included if it votes) counts as
// contact too: the process can reach a quorum, it is not cut off. Only
// time the process could run counts toward the bound: a tick of the
// driver adds at most two tick periods (Config.ContactTick), so a process
// resumed after a long SIGSTOP first asks for its standing instead of
// giving up at once, and on a host so starved that the driver's ticks
// come late (where Raft and every handshake lag too) the bound stretches
// instead of cutting off processes that are merely slow. Until the first
// contact (the job's first election, which an overloaded machine can
// drag out for seconds) the bound is startupFactor times longer, so a
// slow start is not mistaken for a cut-off host.

// contactConfig is the timing of contactCore.
type contactConfig struct {
	Fresh      time.Duration // a leader's message younger than this is contact
	QueryAfter time.Duration // start asking for the standing after this much silence
	QueryEvery time.Duration // at most one round of questions per this period
	Bound      time.Duration // give up after this much silence (Config.CutOff)
	MaxStep    time.Duration // the most one tick adds to the silence
}

// treeFresh is how long a client's contact through the tree stays fresh:
// a parent answers at least every hold (Config.treeHold), with how old
// its own contact is.
func treeFresh(c *Config) time.Duration { return 2*c.treeHold() + c.HeartbeatTimeout }

// startupFactor stretches the bound before the first contact.
const startupFactor = 3

func contactConfigOf(c *Config) contactConfig {
	return contactConfig{
		Fresh:      c.HeartbeatTimeout,
		QueryAfter: max(2*(c.HeartbeatTimeout+c.ElectionTimeout), time.Second),
		QueryEvery: c.StandingInterval,
		Bound:      c.CutOff,
		MaxStep:    2 * c.ContactTick, // what one (late) tick adds to the silence
	}
}

// contactObs is what the driver reads from Raft at a tick.
type contactObs struct {
	Leader      bool          // this node leads
	LastContact time.Time     // last message from a leader; zero: none yet
	Window      time.Duration // LastContact is contact for this long; zero: Fresh
}

// contactStep is what the core asks of the driver after a tick.
type contactStep struct {
	Silent   time.Duration // awake time without contact so far
	Lost     bool          // Raft contact has been missing for QueryAfter (once per loss)
	Warn     bool          // silence has reached half the bound: say so (once per loss)
	Regained bool          // contact is back after lost
	Query    bool          // ask for this process's standing now; call queryDone after
	CutOff   bool          // the bound has passed: give up (once; the core is done)
	Bound    time.Duration // the bound in force (longer before the first contact)
}

// contactCore is the cut-off rule as a pure state machine: ticks with the
// time and what Raft says go in, decisions come out. It never reads a
// clock.
type contactCore struct {
	cfg       contactConfig
	last      time.Time // the previous tick; zero before the first
	silent    time.Duration
	lost      bool // Raft contact lost (lost reported)
	contacted bool // there was contact once
	warned    bool
	querying  bool
	lastQuery time.Time
	done      bool
}

func newContactCore(cfg contactConfig) *contactCore { return &contactCore{cfg: cfg} }

// tick advances the core to now.
func (c *contactCore) tick(now time.Time, o contactObs) contactStep {
	if c.done {
		return contactStep{}
	}
	var dt time.Duration
	if !c.last.IsZero() {
		dt = min(max(now.Sub(c.last), 0), c.cfg.MaxStep)
	}
	c.last = now
	var s contactStep
	fresh := c.cfg.Fresh
	if o.Window > 0 {
		fresh = o.Window
	}
	if o.Leader || (!o.LastContact.IsZero() && now.Sub(o.LastContact) <= fresh) {
		c.silent, c.contacted = 0, true
		if c.lost {
			c.lost, c.warned = false, false
			s.Regained = true
		}
		return s
	}
	c.silent += dt
	s.Silent = c.silent
	s.Bound = c.cfg.Bound
	if !c.contacted {
		s.Bound *= startupFactor
	}
	if c.silent >= s.Bound {
		c.done = true
		s.CutOff = true
		return s
	}
	if c.silent >= s.Bound/2 && !c.warned {
		c.warned = true
		s.Warn = true
	}
	if c.silent >= c.cfg.QueryAfter {
		if !c.lost {
			c.lost = true
			s.Lost = true
		}
		if !c.querying && (c.lastQuery.IsZero() || now.Sub(c.lastQuery) >= c.cfg.QueryEvery) {
			c.querying = true
			c.lastQuery = now
			s.Query = true
		}
	}
	return s
}

// reached says that a majority of the voters answered the round under
// way: that is contact, the silence starts again from zero.
func (c *contactCore) reached() { c.silent, c.contacted = 0, true }

// queryDone says that the round of questions the last Query started is
// over.
func (c *contactCore) queryDone() { c.querying = false }
