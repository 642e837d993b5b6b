package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/procnet"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport/route"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// waitGate waits until the test creates the file name in -gate.
func (p *prog) waitGate(ctx context.Context, name string) error {
	path := filepath.Join(p.gate, name)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for gate %s: %w", path, ctx.Err())
		}
	}
}

func (p *prog) gateOpen(name string) bool {
	_, err := os.Stat(filepath.Join(p.gate, name))
	return err == nil
}

func (p *prog) fail(name string, err error) int {
	say("RESULT case=%s rank=%d FAIL %s", name, p.me, oneLine(err.Error()))
	return 1
}

// faultDeath: 3 ranks; the last one is the victim. The test stops it
// (SIGSTOP) at gate "stopped": operations on it with a short deadline must
// time out without any RankError. Then ranks 0 and 1 block in every kind
// of operation that depends on the victim and print BLOCKING lines; the
// test kills the victim (SIGKILL) and every operation must end in a
// *pgas.RankError naming it, printed with the time it returned (RANKERR
// lines), and later operations on it must fail at once. Survivors exit 0.
//
// With -mode abort (gaspirun's default policy, which tears the job down),
// the survivors only block in a barrier, print what it returned and wait
// to be stopped.
func faultDeath(ctx context.Context, p *prog) int {
	const name = "death"
	rt := p.rt
	victim := p.n - 1
	if _, err := rt.SegmentCreate(ctx, 1, 4096, nil); err != nil {
		return p.fail(name, err)
	}
	all := make([]int, p.n)
	for i := range all {
		all[i] = i
	}
	g7, err := rt.NewGroup(7, all)
	if err != nil {
		return p.fail(name, err)
	}
	if p.me != victim {
		if err := reachVictim(ctx, rt, victim); err != nil {
			return p.fail(name, err)
		}
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return p.fail(name, err)
	}
	say("READY rank=%d stage=setup", p.me)
	if p.me == victim {
		// Stay in the job, serving one-sided operations from the runtime's
		// goroutines, until the test stops and kills this process.
		_, err := rt.NotifyWaitSome(ctx, 1, 900, 1)
		return p.fail(name, fmt.Errorf("the victim was not killed: %v", err))
	}
	if p.mode == "abort" {
		say("BLOCKING rank=%d op=barrier", p.me)
		err := rt.Barrier(ctx, nil)
		say("RANKERR rank=%d op=barrier peer=%d at=%d ok=%v err=%s", p.me, victim, time.Now().UnixNano(), isRankError(err, victim), errText(err))
		// Wait here: gaspirun stops the job.
		rt.NotifyWaitSome(ctx, 1, 900, 1)
		return 1
	}
	if err := p.waitGate(ctx, "stopped"); err != nil {
		return p.fail(name, err)
	}
	if err := deathStopped(ctx, p, victim); err != nil {
		return p.fail(name, err)
	}
	say("RESULT case=stopped-timeout rank=%d PASS", p.me)
	if err := deathBlocked(ctx, p, victim, g7); err != nil {
		return p.fail(name, err)
	}
	if err := deathKnown(ctx, p, victim); err != nil {
		return p.fail(name, err)
	}
	st := rt.Stats()
	say("RESULT case=%s rank=%d PASS peers_down=%d", name, p.me, st.PeersDown)
	// The survivors leave together: a collective on all ranks would fail
	// on the dead one.
	survivors, err := rt.NewGroup(12, all[:victim])
	if err != nil {
		return p.fail(name, err)
	}
	if err := rt.Barrier(ctx, survivors); err != nil {
		return p.fail(name, fmt.Errorf("survivors' barrier: %w", err))
	}
	return 0
}

// reachVictim makes a survivor's first contact with the victim before the
// test stops it (segments are not shared in this case: every operation
// goes by frames). The phases below are about a peer that stops, and then
// dies, once it is known; a first contact with a peer already stopped
// waits for the handshakes' bounds first (docs/design.md §9.3).
func reachVictim(ctx context.Context, rt *pgas.Runtime, victim int) error {
	if err := rt.Write(ctx, 3, victim, loc(1, 1024), loc(1, 1024), 8); err != nil {
		return fmt.Errorf("first write to rank %d: %w", victim, err)
	}
	if err := rt.Wait(ctx, 3); err != nil {
		return fmt.Errorf("first write to rank %d: %w", victim, err)
	}
	if _, err := rt.FetchAdd(ctx, victim, loc(1, 80), 1); err != nil {
		return fmt.Errorf("first atomic on rank %d: %w", victim, err)
	}
	return nil
}

// deathStopped is faultDeath's phase A: the victim is stopped, not dead.
// A Wait and a FetchAdd on it with a short deadline time out, and the
// timeouts alone make it no suspect.
func deathStopped(ctx context.Context, p *prog, victim int) error {
	const short = 300 * time.Millisecond
	rt := p.rt
	if err := rt.Write(ctx, 0, victim, loc(1, int64(8*p.me)), loc(1, 0), 8); err != nil {
		return fmt.Errorf("posting a write to the stopped rank: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, short)
	err := rt.Wait(tctx, 0)
	cancel()
	if !isTimeout(err) {
		return fmt.Errorf("Wait on a write to the stopped rank %d with a %v deadline: %v; want ErrTimeout and no RankError", victim, short, err)
	}
	tctx, cancel = context.WithTimeout(ctx, short)
	_, err = rt.FetchAdd(tctx, victim, loc(1, 64), 1)
	cancel()
	if !isTimeout(err) {
		return fmt.Errorf("FetchAdd on the stopped rank %d with a %v deadline: %v; want ErrTimeout and no RankError", victim, short, err)
	}
	if sv := rt.StateVector(); sv[victim].Suspect {
		return fmt.Errorf("timeouts alone made rank %d suspect: %+v", victim, sv)
	}
	return nil
}

// blockingOp is an operation of faultDeath's phase B.
type blockingOp struct {
	name string
	f    func() error
}

// deathBlocked is faultDeath's phase B: block on the victim in every way
// (BLOCKING lines), then it is killed and every operation must end in a
// RankError naming it (RANKERR lines, with the time each returned).
func deathBlocked(ctx context.Context, p *prog, victim int, g7 *pgas.Group) error {
	ops := blockingOps(ctx, p.rt, victim, g7)
	type outcome struct {
		at  time.Time
		err error
	}
	res := make([]outcome, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			say("BLOCKING rank=%d op=%s", p.me, op.name)
			err := op.f()
			res[i] = outcome{time.Now(), err}
		}()
	}
	wg.Wait()
	failed := 0
	for i, op := range ops {
		ok := isRankError(res[i].err, victim)
		if !ok {
			failed++
		}
		say("RANKERR rank=%d op=%s peer=%d at=%d ok=%v err=%s", p.me, op.name, victim, res[i].at.UnixNano(), ok, errText(res[i].err))
	}
	if failed > 0 {
		return fmt.Errorf("%d operations did not end in a RankError naming rank %d", failed, victim)
	}
	return nil
}

// blockingOps are the operations of phase B, each of which waits on the
// victim.
func blockingOps(ctx context.Context, rt *pgas.Runtime, victim int, g7 *pgas.Group) []blockingOp {
	return []blockingOp{
		{"barrier", func() error { return rt.Barrier(ctx, nil) }},
		// The write of phase A is still outstanding: Wait again.
		{"wait_retry", func() error { return rt.Wait(ctx, 0) }},
		{"write_notify_wait", func() error {
			if err := rt.WriteNotify(ctx, 2, victim, loc(1, 512), loc(1, 0), 64, 1, 1); err != nil {
				return err
			}
			return rt.Wait(ctx, 2)
		}},
		{"read_wait", func() error {
			if err := rt.Read(ctx, 1, victim, loc(1, 0), loc(1, 256), 64); err != nil {
				return err
			}
			return rt.Wait(ctx, 1)
		}},
		{"fetch_add", func() error { _, err := rt.FetchAdd(ctx, victim, loc(1, 64), 1); return err }},
		{"compare_swap", func() error { _, err := rt.CompareSwap(ctx, victim, loc(1, 72), 0, 1); return err }},
		{"passive_send", func() error { return rt.PassiveSend(ctx, victim, []byte("are you there")) }},
		{"notify_barrier", func() error {
			// A notification wait cannot know whom it waits for; a barrier
			// beside it turns the death into an error and cancels it.
			nctx, ncancel := context.WithCancel(ctx)
			defer ncancel()
			berr := make(chan error, 1)
			go func() {
				err := rt.Barrier(ctx, g7)
				if err != nil {
					ncancel()
				}
				berr <- err
			}()
			_, nerr := rt.NotifyWaitSome(nctx, 1, 3, 1)
			ncancel()
			err := <-berr
			if err != nil && !(isTimeout(nerr) && errors.Is(nerr, context.Canceled)) {
				return fmt.Errorf("notification wait ended with %v", nerr)
			}
			return err
		}},
	}
}

// deathKnown is faultDeath's phase C: once the death is known, new
// operations on the victim fail at once with a RankError, and the state
// vector suspects it.
func deathKnown(ctx context.Context, p *prog, victim int) error {
	rt := p.rt
	start := time.Now()
	errs := map[string]error{}
	errs["write"] = rt.Write(ctx, 3, victim, loc(1, 0), loc(1, 0), 8)
	_, errs["fetch_add"] = rt.FetchAdd(ctx, victim, loc(1, 64), 1)
	errs["read"] = rt.Read(ctx, 3, victim, loc(1, 0), loc(1, 0), 8)
	errs["passive_send"] = rt.PassiveSend(ctx, victim, []byte("x"))
	if took := time.Since(start); took > 2*time.Second {
		return fmt.Errorf("operations on the dead rank took %v; they must fail at once", took)
	}
	for what, err := range errs {
		if !isRankError(err, victim) {
			return fmt.Errorf("%s after the death: %v; want a RankError naming rank %d", what, err, victim)
		}
	}
	if sv := rt.StateVector(); !sv[victim].Suspect {
		return fmt.Errorf("state vector after the death does not suspect rank %d: %+v", victim, sv)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return strconv.Quote(err.Error())
}

// faultSecure: ranks exchange data in rounds (write+notify to the right,
// check, agree on whether to stop) while the test attacks their data-plane
// listeners, printed as LISTEN lines; the test opens gate "done" when it is
// finished. Every round must check out, and the runtime must not have seen
// a single rejected frame or lost peer. After the last round each rank
// prints its transport's counters (STATS line): the test opens the gate
// only once every refusal is logged, and a refusal is counted before it
// is logged, so the line holds every refusal of the attack.
func faultSecure(ctx context.Context, p *prog) int {
	const name = "secure"
	rt := p.rt
	data := rt.Transport()
	if r, ok := data.(*route.Router); ok {
		data = r.Far() // same-host peers talk over shared memory; TCP is what is attacked
	}
	tr, ok := data.(*tcp.Transport)
	if !ok {
		return p.fail(name, fmt.Errorf("the runtime's transport is a %T, want a *tcp.Transport", rt.Transport()))
	}
	s, err := rt.SegmentCreate(ctx, 1, 1<<16, nil)
	if err != nil {
		return p.fail(name, err)
	}
	addrs, err := listenAddrs()
	if err != nil {
		return p.fail(name, err)
	}
	say("LISTEN rank=%d addr=%s", p.me, strings.Join(addrs, ","))
	if err := rt.Barrier(ctx, nil); err != nil {
		return p.fail(name, err)
	}
	say("READY rank=%d stage=traffic", p.me)
	right, left := (p.me+1)%p.n, (p.me+p.n-1)%p.n
	const off, size = 32 << 10, 4096
	rounds := 0
	for round := 1; round < 1_000_000; round++ {
		src := s.Bytes()[off : off+size]
		for i := range src {
			src[i] = pat(round, p.me, i)
		}
		if err := rt.WriteNotify(ctx, 0, right, loc(1, 0), loc(1, off), size, 1, uint32(round)); err != nil {
			return p.fail(name, fmt.Errorf("round %d: %w", round, err))
		}
		if _, err := rt.NotifyWaitSome(ctx, 1, 1, 1); err != nil {
			return p.fail(name, fmt.Errorf("round %d: %w", round, err))
		}
		if v, _ := rt.NotifyReset(1, 1); v != uint32(round) {
			return p.fail(name, fmt.Errorf("round %d: notification %d", round, v))
		}
		for i, b := range s.Bytes()[:size] {
			if b != pat(round, left, i) {
				return p.fail(name, fmt.Errorf("round %d: byte %d is %d, want %d", round, i, b, pat(round, left, i)))
			}
		}
		if err := rt.Wait(ctx, 0); err != nil {
			return p.fail(name, fmt.Errorf("round %d: %w", round, err))
		}
		stop := []uint64{0}
		if p.me == 0 {
			if p.gateOpen("done") {
				stop[0] = 1
			} else {
				time.Sleep(2 * time.Millisecond) // keep the traffic light on a busy host
			}
		}
		// Everybody's contribution is needed, so this also keeps the
		// rounds in step.
		if err := pgas.Allreduce(ctx, rt, nil, stop, pgas.OpMax); err != nil {
			return p.fail(name, fmt.Errorf("round %d: %w", round, err))
		}
		rounds = round
		if stop[0] == 1 {
			break
		}
	}
	ts := tr.Stats()
	say("STATS rank=%d refused=%d badframes=%d probes=%d", p.me, ts.HandshakesRefused, ts.BadFrames, ts.Probes)
	st := rt.Stats()
	if st.FramesRejected != 0 || st.PeersDown != 0 || st.RemoteErrors != 0 {
		return p.fail(name, fmt.Errorf("the runtime saw the attack: %+v", st))
	}
	say("RESULT case=%s rank=%d PASS rounds=%d frames_rejected=%d peers_down=%d", name, p.me, rounds, st.FramesRejected, st.PeersDown)
	if err := rt.Barrier(ctx, nil); err != nil {
		return p.fail(name, err)
	}
	return 0
}

// faultExit: after a barrier rank 1 exits with code 3 (without closing its
// runtime). The others wait on a local notification until gaspirun stops
// them, or, with -mode react, block in a barrier and exit 4 when it fails.
func faultExit(ctx context.Context, p *prog) int {
	if err := p.rt.Barrier(ctx, nil); err != nil {
		return p.fail("exit", err)
	}
	if _, err := p.rt.SegmentCreate(ctx, 1, 64, nil); err != nil {
		return p.fail("exit", err)
	}
	if p.me == 1 {
		say("EXITING rank=%d code=3", p.me)
		os.Exit(3)
	}
	if p.mode == "react" {
		err := p.rt.Barrier(ctx, nil)
		say("RANKERR rank=%d op=barrier peer=1 at=%d ok=%v err=%s", p.me, time.Now().UnixNano(), isRankError(err, 1), errText(err))
		return 4
	}
	say("READY rank=%d stage=waiting", p.me)
	p.rt.NotifyWaitSome(ctx, 1, 5, 1)
	return 1
}

// faultHang: every rank hangs. Rank 0 first starts a child process (in its
// process group) and prints its pid; with -mode stubborn, rank 1 ignores
// SIGTERM, so only SIGKILL after gaspirun's grace ends it.
func faultHang(ctx context.Context, p *prog) int {
	if p.me == 0 {
		cmd := exec.Command(os.Args[0], "-case", "sleeper", "-limit", "10m")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return p.fail("hang", err)
		}
		say("CHILD rank=%d pid=%d", p.me, cmd.Process.Pid)
	}
	if p.me == 1 && p.mode == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
	}
	if err := p.rt.Barrier(ctx, nil); err != nil {
		return p.fail("hang", err)
	}
	say("READY rank=%d stage=hanging", p.me)
	time.Sleep(10 * time.Minute)
	return 1
}

// listenAddrs returns the TCP addresses this process listens on: the
// runtime does not tell its data-plane address, so it is found through
// /proc.
func listenAddrs() ([]string, error) {
	out := procnet.ListeningAddrs([]int{os.Getpid()})
	if len(out) == 0 {
		return nil, errors.New("no listening socket found in /proc/self")
	}
	return out, nil
}

// faultAckClose: rank 0 writes to rank 1 with a notification and waits for
// remote completion; rank 1 closes its runtime and exits as soon as it sees
// the notification. The write was applied, so rank 0's Wait must succeed.
func faultAckClose(ctx context.Context, p *prog) int {
	const name = "ackclose"
	rt := p.rt
	if _, err := rt.SegmentCreate(ctx, 13, 4096, nil); err != nil {
		return p.fail(name, err)
	}
	switch p.me {
	case 0:
		if err := rt.WriteNotify(ctx, 0, 1, loc(13, 0), loc(13, 8), 8, 1, 1); err != nil {
			return p.fail(name, err)
		}
		if err := rt.Wait(ctx, 0); err != nil {
			return p.fail(name, fmt.Errorf("Wait for a write that rank 1 applied before it left: %w", err))
		}
	case 1:
		if _, err := rt.NotifyWaitSome(ctx, 13, 1, 1); err != nil {
			return p.fail(name, err)
		}
		say("RESULT case=%s rank=%d PASS", name, p.me)
		rt.Close()
		return 0
	}
	say("RESULT case=%s rank=%d PASS", name, p.me)
	return 0
}

// faultSeqReuse: rank 0's write of 32 MiB to rank 1, which the test has
// stopped (gate "stopped"), times out after part of it is on the wire; the
// transport finishes the frame in the background. After the test resumes
// rank 1 (gate "continued") and a FetchAdd has made the round trip, rank 0
// writes to a segment rank 1 deleted: Wait must report the refusal.
func faultSeqReuse(ctx context.Context, p *prog) int {
	const name = "seqreuse"
	const big = 32 << 20
	rt := p.rt
	if _, err := rt.SegmentCreate(ctx, 20, big+4096, nil); err != nil {
		return p.fail(name, err)
	}
	if _, err := rt.SegmentCreate(ctx, 21, 4096, nil); err != nil {
		return p.fail(name, err)
	}
	if p.me == 1 {
		if err := rt.SegmentDelete(21); err != nil {
			return p.fail(name, err)
		}
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return p.fail(name, err)
	}
	say("READY rank=%d stage=setup", p.me)
	if p.me != 0 {
		if _, err := rt.NotifyWaitSome(ctx, 20, 1, 1); err != nil {
			return p.fail(name, err)
		}
		say("RESULT case=%s rank=%d PASS", name, p.me)
		return 0
	}
	if err := p.waitGate(ctx, "stopped"); err != nil {
		return p.fail(name, err)
	}
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := rt.Write(tctx, 0, 1, loc(20, 0), loc(20, 0), big)
	cancel()
	say("TIMEDOUT rank=%d err=%s", p.me, errText(err))
	if !isTimeout(err) {
		return p.fail(name, fmt.Errorf("a 32 MiB write to a stopped rank with a 300ms deadline: %v; want ErrTimeout", err))
	}
	if err := p.waitGate(ctx, "continued"); err != nil {
		return p.fail(name, err)
	}
	// A round trip on the same connection: rank 1 has applied (and acked)
	// whatever rank 0 sent before.
	if _, err := rt.FetchAdd(ctx, 1, loc(20, big), 1); err != nil {
		return p.fail(name, err)
	}
	if err := rt.Write(ctx, 1, 1, loc(21, 0), loc(20, 0), 8); err != nil {
		return p.fail(name, err)
	}
	err = rt.Wait(ctx, 1)
	if !errors.Is(err, pgas.ErrRemote) || !errors.Is(err, pgas.ErrNoSegment) {
		return p.fail(name, fmt.Errorf("Wait for a write to a segment rank 1 deleted: %v; want a remote ErrNoSegment", err))
	}
	if err := rt.Notify(ctx, 2, 1, 20, 1, 1); err != nil {
		return p.fail(name, err)
	}
	if err := rt.Wait(ctx, 2); err != nil {
		return p.fail(name, err)
	}
	say("RESULT case=%s rank=%d PASS", name, p.me)
	return 0
}
