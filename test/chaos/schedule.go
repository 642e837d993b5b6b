package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults a schedule can hold. "Loss" below means the runtime must
// replace the process with a spare; the other faults must be ridden out.
const (
	// KillRank: SIGKILL of the process holding Rank, from outside, when
	// the job reaches At. A loss.
	KillRank Kind = "kill-rank"
	// KillSpare: SIGKILL of an idle spare. Shrinks the pool by one.
	KillSpare Kind = "kill-spare"
	// KillLeader: SIGKILL of the Raft leader's process (a rank or a
	// spare). A loss either way.
	KillLeader Kind = "kill-leader"
	// KillCommit: the rank kills itself inside a checkpoint's commit
	// (K-means --inject kill:rank=R,iter=I,phase=commit). A loss.
	KillCommit Kind = "kill-commit"
	// KillMirror: after a first loss of Rank, the holder of Rank's new
	// mirror is killed once the mirror was rebuilt (K-means --inject
	// kill:rank=R then kill:mirror-of=R). Two losses.
	KillMirror Kind = "kill-mirror"
	// KillInRecovery: a loss of Rank, then, as soon as a survivor
	// confirms it, a second rank two places away is killed while the
	// first recovery runs. Two losses.
	KillInRecovery Kind = "kill-in-recovery"
	// PauseShort: SIGSTOP of Rank's process for Dur (below the failure
	// detector's suspicion timeout), then SIGCONT.
	PauseShort Kind = "pause-short"
	// PauseLong: SIGSTOP for Dur (beyond detection), then SIGCONT: the
	// process is replaced and, resumed, finds itself fenced. A loss.
	PauseLong Kind = "pause-long"
	// SlowLink: every read and write of Rank's process waits Param ms
	// for Dur (internal/netfault).
	SlowLink Kind = "slow-link"
	// LossyLink: each write of Rank's process is lost with probability
	// Param for Dur, costing a retransmission timeout.
	LossyLink Kind = "lossy-link"
	// Partition: nothing in or out of Rank's process for Dur (beyond
	// detection), then the network heals. A loss.
	Partition Kind = "partition"
	// HostLoss: SIGKILL of every process on one host label at once
	// (two ranks). Two losses, recovered from mirrors on other hosts.
	HostLoss Kind = "host-loss"
	// DiskCorrupt: the job is killed without spares (it fails), one file
	// of its newest disk checkpoint is corrupted (Param 0) or truncated
	// (Param 1), and gaspirun --resume must fall back or fail cleanly.
	DiskCorrupt Kind = "disk-corrupt"
	// PartitionWriter: from iteration At, Rank keeps storing into its
	// right neighbour's memory (K-means --inject store:rank=R,iter=I),
	// and its process is partitioned as by Partition: frames stop, its
	// direct stores do not. It is declared failed while it runs and
	// stores; nothing it stores after the view may be seen (the program
	// checks at every iteration, and the result must be the reference).
	// A loss.
	PartitionWriter Kind = "partition-writer"
	// CancelWriter: from iteration At, Rank stores into its neighbour's
	// memory with contexts that have ended or end during the call
	// (store:...,mode=cancel) while the neighbour waits on the
	// notification: every store returns an error or wakes the waiter.
	CancelWriter Kind = "cancel-writer"
	// KillStoreWake: from iteration At, Rank stores to a waiting
	// neighbour (store:...,mode=wait), and the runtime's fault point
	// (PGAS_FAULTPOINT=pgas.store-wake, internal/faultpoint) SIGKILLs the
	// writer after its first store that found a parked waiter, before the
	// wake-up frame goes. A loss.
	KillStoreWake Kind = "kill-store-wake"
	// RespawnSpaced: one of the three or four SIGKILLs of a schedule with
	// one spare and gaspirun --respawn (more losses than spares, spaced):
	// the holder of Rank is killed from outside at At, as by KillRank,
	// once the replacements of the earlier kills joined the job as spares
	// (new process ids, from Ranks+Spares up) and the recoveries settled.
	// The first kill takes the spare, each next one the replacement of the
	// kill before it: the job must succeed. A loss; the kind owns its
	// schedule.
	RespawnSpaced Kind = "respawn-spaced"
)

// Kinds lists every kind, in the order of the summary table.
var Kinds = []Kind{KillRank, KillSpare, KillLeader, KillCommit, KillMirror, KillInRecovery,
	PauseShort, PauseLong, SlowLink, LossyLink, Partition, HostLoss, DiskCorrupt,
	PartitionWriter, CancelWriter, KillStoreWake, RespawnSpaced}

// losses is how many spares a fault consumes.
func (k Kind) losses() int {
	switch k {
	case KillRank, KillSpare, KillLeader, KillCommit, PauseLong, Partition, PartitionWriter, KillStoreWake, RespawnSpaced:
		return 1
	case KillMirror, KillInRecovery, HostLoss:
		return 2
	}
	return 0
}

// netFault reports whether a fault goes through internal/netfault.
func (k Kind) netFault() bool {
	return k == SlowLink || k == LossyLink || k == Partition || k == PartitionWriter
}

// storeMode is the K-means store injection's mode of a kind that has one.
func (k Kind) storeMode() (mode string, ok bool) {
	switch k {
	case PartitionWriter:
		return "", true
	case CancelWriter:
		return "cancel", true
	case KillStoreWake:
		return "wait", true
	}
	return "", false
}

// byProgram reports whether the program (K-means --inject, or the
// runtime's fault point) carries the fault out, and its output says
// whether it did.
func (k Kind) byProgram() bool {
	return k == KillCommit || k == KillMirror || k == CancelWriter || k == KillStoreWake
}

// Fault is one entry of a schedule.
type Fault struct {
	Kind  Kind
	Rank  int           // the rank it targets, where it targets one
	At    int           // K-means: the iteration; TeraSort: per mille of the job's logical progress (records rank 0 sent and wrote)
	Dur   time.Duration // pauses, links, partitions
	Param float64       // SlowLink: delay ms; LossyLink: probability; DiskCorrupt: 0 corrupt, 1 truncate
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s rank=%d at=%d", f.Kind, f.Rank, f.At)
	if f.Dur > 0 {
		s += " dur=" + f.Dur.String()
	}
	switch f.Kind {
	case SlowLink:
		s += fmt.Sprintf(" delay=%gms", f.Param)
	case LossyLink:
		s += fmt.Sprintf(" loss=%g", f.Param)
	case DiskCorrupt:
		s += map[bool]string{true: " mode=truncate", false: " mode=corrupt"}[f.Param == 1]
	}
	return s
}

// Workload names the job a schedule runs.
type Workload string

const (
	KMeans   Workload = "kmeans"
	TeraSort Workload = "terasort"
)

// Outcome is what a schedule must end in.
type Outcome int

const (
	// Succeed: exit 0 with the failure-free reference result.
	Succeed Outcome = iota
	// Exhaust: more losses than spares; the job must end with the spare
	// pool exhausted (exit 75), or, without any spare, with gaspirun's
	// abort on the first death (exit 137). Never with a result.
	Exhaust
	// ResumeOrRefuse: the disk-level scenario; the resumed job must give
	// the reference result, or fail naming the damaged checkpoint.
	ResumeOrRefuse
)

func (o Outcome) String() string {
	return [...]string{"succeed", "exhaust", "resume-or-refuse"}[o]
}

// Schedule is everything one chaos run does, drawn from Seed alone.
type Schedule struct {
	Seed         uint64
	Workload     Workload
	Ranks        int // the job's ranks: Ranks, or the scale mode's count
	Spares       int
	Mirrors      int
	RanksPerHost int // 0: one host label for all
	// Respawn runs the job with gaspirun --respawn: every lost process is
	// replaced by a new one that joins the running job as a spare, with a
	// process id from Ranks+Spares up that no process had before.
	Respawn bool
	Faults  []Fault
	Expect  Outcome
}

// Ranks is the job size of the normal mode's schedules.
const Ranks = 4

// Timing the schedules are built around: the runtime's defaults
// (health.DefaultConfig: suspicion 1.5 s) decide what is short and long.
const (
	shortPause = 300 * time.Millisecond
	longPause  = 3 * time.Second
)

// Draw makes the schedule of seed for workload w. lastAt is the latest
// trigger point the workload can honour (K-means: an iteration well
// before --max-iter; TeraSort: per mille of the job's logical progress,
// the records rank 0 sent and then wrote). The first fault's kind decides
// the rest: a disk corruption, a mirror kill, a host loss, a kill in a
// recovery or a respawn schedule (drawRespawn) owns its schedule; other
// kinds share a K-means schedule with up to two more.
func Draw(seed uint64, w Workload, lastAt int) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x6761737069))
	s := Schedule{Seed: seed, Workload: w, Ranks: Ranks, Mirrors: 1}
	kinds := Kinds
	if w == TeraSort {
		// TeraSort has no injections at iterations (K-means --inject:
		// kills in a commit or of a mirror's holder, store injections)
		// and no disk level: the kinds that need them are K-means-only.
		kinds = []Kind{KillRank, KillSpare, KillLeader, KillInRecovery, PauseShort, PauseLong, SlowLink, LossyLink, Partition, HostLoss, RespawnSpaced}
	}
	first := kinds[rng.IntN(len(kinds))]
	if first == RespawnSpaced {
		return drawRespawn(rng, s, lastAt)
	}
	if first == DiskCorrupt {
		s.Expect = ResumeOrRefuse
		s.Faults = []Fault{{Kind: DiskCorrupt, Rank: rng.IntN(Ranks), At: lastAt/3 + rng.IntN(lastAt/3), Param: float64(rng.IntN(2))}}
		return s
	}
	n := 1
	if w == KMeans && first != KillMirror && first != HostLoss && first != KillInRecovery {
		n += rng.IntN(3) // up to three faults, spread over the run
	}
	picked := []Kind{first}
	for len(picked) < n {
		k := kinds[rng.IntN(len(kinds))]
		if k == DiskCorrupt || k == KillMirror || k == HostLoss || k == KillInRecovery || k == RespawnSpaced {
			continue // these own their schedule
		}
		if k == KillStoreWake && slices.Contains(picked, KillStoreWake) {
			continue // one a schedule (below)
		}
		picked = append(picked, k)
	}
	// A kill-store-wake fires when a store first finds the waiter parked,
	// which on a busy machine may be dozens of iterations after At: a
	// fault after it could land in the recovery of its loss, on the rank
	// beside it that holds its mirror, two losses together that one
	// mirror does not cover in a schedule that counted them apart (the
	// job then had no checkpoint to restore). Nothing comes after it: it
	// goes last, and a schedule has one.
	if i := slices.Index(picked, KillStoreWake); i >= 0 {
		picked = append(slices.Delete(picked, i, i+1), KillStoreWake)
	}
	span := lastAt / n
	losses, net, spareKill := 0, false, false
	for i, k := range picked {
		f := Fault{Kind: k, Rank: rng.IntN(Ranks)}
		lo := span * i
		if w == KMeans {
			lo = max(lo, 5)
		} else {
			lo = max(lo, lastAt/4)
		}
		f.At = lo + rng.IntN(max(1, span/2))
		switch k {
		case PauseShort:
			f.Dur = shortPause + time.Duration(rng.IntN(300))*time.Millisecond
		case PauseLong:
			f.Dur = longPause
		case SlowLink:
			f.Dur = time.Duration(500+rng.IntN(1500)) * time.Millisecond
			f.Param = float64(5 + rng.IntN(30))
		case LossyLink:
			f.Dur = time.Duration(500+rng.IntN(1500)) * time.Millisecond
			f.Param = []float64{0.01, 0.02, 0.05}[rng.IntN(3)]
		case Partition, PartitionWriter:
			f.Dur = longPause
		case HostLoss:
			s.RanksPerHost = 2
			f.Rank = 2 * rng.IntN(2) // the first rank of host0 or host1
		}
		losses += k.losses()
		net = net || k.netFault() || k == PauseShort
		spareKill = spareKill || k == KillSpare
		s.Faults = append(s.Faults, f)
	}
	// Enough spares for every loss plus one, for a process that a busy
	// machine makes miss its heartbeats, and one more where a slow or
	// lossy link, a partition or a pause might cost a process; or, one
	// schedule in eight, one spare short of the losses (only where every
	// loss is certain: no network fault, and no spare kill, which has no
	// target once the pool is empty).
	s.Spares = losses + 1
	if net {
		s.Spares++
	}
	if losses > 0 && !net && !spareKill && rng.IntN(8) == 0 {
		s.Spares = losses - 1
		s.Expect = Exhaust
	}
	return s
}

// Respawn schedules: the spares the job starts with, the fewest and most
// kills, and the fewest iterations between two kills of K-means.
const (
	respawnSpares   = 1
	respawnMinKills = 3
	respawnMaxKills = 4
	respawnMinGap   = 4
)

// drawRespawn makes a respawn-spaced schedule: gaspirun --respawn, one
// spare, and three or four kills of drawn ranks, one in each of as many
// equal spans of the workload's points (K-means: from iteration 5 to
// lastAt, spans of at least twice respawnMinGap iterations; TeraSort: a
// quarter to three quarters of its progress), in the first half of its
// span, so that two kills are more than half a span apart and each
// replacement has time to start and join before the next kill. The
// harness waits for it too (apply), and for the recoveries to settle.
// More losses than spares, and none beyond what the refilled pool
// covers: the job must succeed.
func drawRespawn(rng *rand.Rand, s Schedule, lastAt int) Schedule {
	s.Respawn, s.Spares, s.Expect = true, respawnSpares, Succeed
	n := respawnMinKills + rng.IntN(respawnMaxKills-respawnMinKills+1)
	lo, hi, least := 5, lastAt, 2*respawnMinGap
	if s.Workload == TeraSort {
		lo, hi, least = lastAt/4, lastAt*3/4, 1
	}
	span := max((hi-lo)/n, least)
	for i := range n {
		s.Faults = append(s.Faults, Fault{Kind: RespawnSpaced, Rank: rng.IntN(s.Ranks), At: lo + span*i + rng.IntN(max(1, span/2))})
	}
	return s
}

// String is the schedule, one fault per line after a header line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d workload=%s ranks=%d spares=%d mirrors=%d ranks-per-host=%d expect=%s",
		s.Seed, s.Workload, s.Ranks, s.Spares, s.Mirrors, s.RanksPerHost, s.Expect)
	if s.Respawn {
		b.WriteString(" respawn")
	}
	for i, f := range s.Faults {
		fmt.Fprintf(&b, "\n  fault %d: %s", i+1, f)
	}
	return b.String()
}

// Replay is the one-line command that runs this schedule again.
func (s Schedule) Replay() string {
	if s.Ranks != Ranks {
		return fmt.Sprintf("go test ./test/chaos -run '^TestChaosScale$/seed=%d$' -chaos.scale=%d -chaos.scaleseeds=%d -v", s.Seed, s.Ranks, s.Seed)
	}
	return fmt.Sprintf("go test ./test/chaos -run '^TestChaos$/%s/seed=%d$' -chaos.seeds=%d -v", s.Workload, s.Seed, s.Seed)
}

// ScaleKinds are the faults of the scale mode: every kind that needs no
// host layout, disk level or link rules, on a job of hundreds of
// processes.
var ScaleKinds = []Kind{KillRank, KillSpare, KillLeader, KillCommit, KillInRecovery, PauseShort, PauseLong}

// DrawScale makes the scale mode's schedule of seed: K-means on ranks
// ranks, one or two faults of ScaleKinds at ranks drawn over the whole job,
// and a spare for every loss plus one (on a starved machine a process may
// miss its heartbeats), or, one schedule in eight, one spare short.
func DrawScale(seed uint64, ranks, lastAt int) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x7363616c65))
	s := Schedule{Seed: seed, Workload: KMeans, Ranks: ranks, Mirrors: 1}
	n := 1 + rng.IntN(2)
	span := lastAt / n
	losses, spareKill, pause := 0, false, false
	for i := range n {
		k := ScaleKinds[rng.IntN(len(ScaleKinds))]
		if i > 0 && k == KillInRecovery {
			k = KillRank // it makes its own overlap: one per schedule, first
		}
		f := Fault{Kind: k, Rank: rng.IntN(ranks), At: max(span*i, 5) + rng.IntN(max(1, span/2))}
		switch k {
		case PauseShort:
			f.Dur = shortPause + time.Duration(rng.IntN(300))*time.Millisecond
			pause = true
		case PauseLong:
			f.Dur = longPause
		}
		losses += k.losses()
		spareKill = spareKill || k == KillSpare
		s.Faults = append(s.Faults, f)
		if k == KillInRecovery {
			break
		}
	}
	s.Spares = losses + 1
	if pause {
		s.Spares++
	}
	if losses > 0 && !pause && !spareKill && rng.IntN(8) == 0 {
		s.Spares = losses - 1
		s.Expect = Exhaust
	}
	return s
}
