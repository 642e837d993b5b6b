// Command semantics is the SPMD program of the real-process TCP tier
// (package test/tcptier). Started by gaspirun, every rank runs the cases
// named by -case and prints one line per case and rank that the Go tests
// parse:
//
//	START proc=P at=UNIXNANO                     just before Init
//	PID proc=P rank=R pid=N                      once, after Init
//	RESULT case=NAME rank=R PASS [detail]        or ... FAIL reason
//	DATA case=NAME rank=R key=K hex=...          bits to compare across ranks and runs
//	READY rank=R stage=S                         a fault case waits for the test here
//	BLOCKING rank=R op=OP                        death: about to block on the victim
//	RANKERR rank=R op=OP peer=V at=UNIXNANO ok=B err="..."   how it ended, and when
//	LISTEN rank=R addr=HOST:PORT                 secure: the data-plane listener
//	STATS rank=R refused=N badframes=N probes=N  secure: the transport's counters at the end
//	CHILD, SLEEPER, EXITING, TIMEDOUT            hang, exit and seqreuse progress
//
// Semantic cases (-case all runs them in this order): ordering, notify,
// queuefull, timeout, bounds, remotebounds, read, atomics, bcast,
// allgather, allreduce, passive. Cases that pgas fails today, run only
// when named: negrank, collretry, deleterace. Fault cases, one per job, in
// which the test acts on the processes (see faults.go): death, secure,
// exit, hang, ackclose, seqreuse. Exit status: 0 when every case passed,
// 1 when one failed (the job is then torn down by gaspirun), 2 for setup
// errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
)

// semanticCases run in this order for -case all.
var semanticCases = []struct {
	name string
	run  func(ctx context.Context, p *prog) error
}{
	{"ordering", caseOrdering},
	{"notify", caseNotify},
	{"queuefull", caseQueueFull},
	{"timeout", caseTimeout},
	{"bounds", caseBounds},
	{"remotebounds", caseRemoteBounds},
	{"read", caseRead},
	{"atomics", caseAtomics},
	{"bcast", caseBcast},
	{"allgather", caseAllgather},
	{"allreduce", caseAllreduce},
	{"passive", casePassive},
}

// extraCases are run only when named: they check behaviour that pgas gets
// wrong today (see the known-bug tests).
var extraCases = []struct {
	name string
	run  func(ctx context.Context, p *prog) error
}{
	{"negrank", caseNegativeRank},
	{"collretry", caseCollectiveRetry},
	{"deleterace", caseDeleteRace},
}

// prog is one rank's view of the job plus the flags.
type prog struct {
	rt     *pgas.Runtime
	me, n  int
	depth  int           // the QueueDepth the runtime was started with
	rounds int           // rounds of the ordering case
	jitter time.Duration // upper bound of the per-rank random pauses
	rng    *rand.Rand    // seeded by -seed and the rank: the pauses differ per run
	gate   string        // directory the test creates gate files in
	mode   string        // variant of a fault case
}

var outMu sync.Mutex

// say prints one protocol line on stdout.
func say(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func main() { os.Exit(run()) }

func run() int {
	caseFlag := flag.String("case", "all", "comma-separated cases, or all (the semantic cases), or one fault case: death, secure, exit, hang, ackclose, seqreuse")
	depth := flag.Int("depth", 64, "QueueDepth of the runtime (operations per queue between Waits)")
	rounds := flag.Int("rounds", 20, "rounds of the ordering case")
	jitter := flag.Duration("jitter", 0, "upper bound of random per-rank pauses before Init and before each allreduce")
	seed := flag.Uint64("seed", 1, "seed of the pauses")
	stagger := flag.String("stagger", "", "reverse: process p starts (NPROCS-1-p)*40ms late, so the last starts first; otherwise -jitter decides")
	gate := flag.String("gate", "", "directory in which the test creates gate files (fault cases)")
	mode := flag.String("mode", "", "variant of a fault case (death: continue or abort)")
	limit := flag.Duration("limit", 90*time.Second, "deadline of the whole program")
	flag.Parse()

	if *caseFlag == "sleeper" {
		// A child process started by the hang case: it only has to exist.
		say("SLEEPER pid=%d", os.Getpid())
		time.Sleep(*limit)
		return 0
	}
	proc := os.Getenv("PGAS_PROC")
	var procNum uint64
	fmt.Sscan(proc, &procNum)
	rng := rand.New(rand.NewPCG(*seed, procNum))
	// Stagger the start: the processes register with the rendezvous and
	// connect in another order.
	switch {
	case *stagger == "reverse":
		var n uint64
		fmt.Sscan(os.Getenv("PGAS_NPROCS"), &n)
		time.Sleep(time.Duration(n-1-procNum) * 40 * time.Millisecond)
	case *jitter > 0:
		time.Sleep(time.Duration(rng.Int64N(int64(*jitter))))
	}
	say("START proc=%s at=%d", proc, time.Now().UnixNano())

	ctx, cancel := context.WithTimeout(context.Background(), *limit)
	defer cancel()
	base := pgas.LocalConfig()
	base.QueueDepth = *depth
	if *caseFlag == "seqreuse" || *caseFlag == "death" {
		// The case needs a write whose send cannot finish while the
		// target is stopped; a direct copy into its segment would.
		os.Setenv(job.VarShmSegments, "0")
	}
	rt, err := job.Init(ctx, job.Options{Runtime: &base})
	if err != nil {
		fmt.Fprintf(os.Stderr, "init: %v\n", err)
		return 2
	}
	defer rt.Close()
	p := &prog{rt: rt, me: rt.Rank(), n: rt.Size(), depth: *depth, rounds: *rounds, jitter: *jitter, rng: rng, gate: *gate, mode: *mode}
	say("PID proc=%s rank=%d pid=%d", proc, p.me, os.Getpid())

	switch *caseFlag {
	case "death":
		return faultDeath(ctx, p)
	case "secure":
		return faultSecure(ctx, p)
	case "exit":
		return faultExit(ctx, p)
	case "hang":
		return faultHang(ctx, p)
	case "ackclose":
		return faultAckClose(ctx, p)
	case "seqreuse":
		return faultSeqReuse(ctx, p)
	}
	names := strings.Split(*caseFlag, ",")
	if *caseFlag == "all" {
		names = names[:0]
		for _, c := range semanticCases {
			names = append(names, c.name)
		}
	}
	for _, name := range names {
		f := lookup(name)
		if f == nil {
			fmt.Fprintf(os.Stderr, "unknown case %q\n", name)
			return 2
		}
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		err := f(cctx, p)
		if err == nil {
			// Every case ends in step: nobody starts the next one while a
			// peer still reads memory of this one.
			err = rt.Barrier(cctx, nil)
		}
		ccancel()
		if err != nil {
			say("RESULT case=%s rank=%d FAIL %s", name, p.me, oneLine(err.Error()))
			return 1
		}
		say("RESULT case=%s rank=%d PASS", name, p.me)
	}
	return 0
}

func lookup(name string) func(context.Context, *prog) error {
	for _, c := range append(semanticCases, extraCases...) {
		if c.name == name {
			return c.run
		}
	}
	return nil
}

// pause sleeps a random time below -jitter, different per rank and seed.
func (p *prog) pause() {
	if p.jitter > 0 {
		time.Sleep(time.Duration(p.rng.Int64N(int64(p.jitter))))
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// isRankError reports whether err is a *pgas.RankError naming rank.
func isRankError(err error, rank int) bool {
	var re *pgas.RankError
	return errors.As(err, &re) && re.Rank == rank && errors.Is(err, pgas.ErrRankFailed)
}

// isTimeout reports whether err is a timeout and not a rank failure.
func isTimeout(err error) bool {
	var re *pgas.RankError
	return errors.Is(err, pgas.ErrTimeout) && !errors.As(err, &re) && !errors.Is(err, pgas.ErrRankFailed)
}
