package kmeans

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/inject"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Store is an injected storm of same-host stores, for the chaos suite's
// faults on the runtime's direct writes (docs/design.md §3): after
// iteration Iter, the process that holds Rank keeps writing, for the rest
// of its life, a record (its epoch, its process, a count) and a
// notification into its right neighbour's store segment, every
// storeEvery, whatever its calls return. A process partitioned from the
// job so goes on storing into its neighbour's memory after the view that
// declared it failed; every rank checks at every iteration that no record
// of an older epoch changes its segment once it has looked at it in its
// current epoch, and that no notification of an older epoch is set there
// (StoreViolation otherwise: the run fails).
//
// Mode "wait": the neighbour also parks a waiter on the notification
// (NotifyWaitSome), so that stores find a parked waiter and send
// wake-ups; "cancel": as "wait", and every store goes with a context that
// has ended, or ends during the call. A waiter that sleeps storeWaitBound
// with its notification set in its current epoch missed its wake-up (a
// violation too).
type Store struct {
	Rank int
	Iter int
	Mode string // "", "wait" or "cancel"
}

// ParseStore parses store:rank=R,iter=I[,mode=wait|cancel].
func ParseStore(s string) (Store, error) {
	k, err := inject.ParseVerb(s, "store", storeGrammar)
	if err != nil {
		return Store{}, fmt.Errorf("kmeans: %w", err)
	}
	if !k.Has("iter") || k.Int("iter") < 1 {
		return Store{}, fmt.Errorf("kmeans: %w", k.Errorf("give iter=I, an iteration from 1"))
	}
	return Store{Rank: k.Int("rank"), Iter: k.Int("iter"), Mode: k.Text("mode")}, nil
}

var storeGrammar = &inject.Grammar{Keys: []inject.Key{
	{Name: "rank", Kind: inject.Rank, Target: true},
	{Name: "iter", Kind: inject.Count},
	{Name: "mode", Kind: inject.Word, Words: []string{"wait", "cancel"}},
}, Want: "store:rank=R,iter=I, optionally with ,mode=wait or ,mode=cancel"}

// ErrStoreViolation is returned by Run when a rank saw a store the
// fencing contract forbids, or a waiter that missed its wake-up.
var ErrStoreViolation = errors.New("kmeans: store injection")

const (
	storeSeg    = segments.ID(0xFE00) // below the checkpointer's 0xFF00..0xFF02
	storeQueue  = pgas.Queue(5)       // the checkpointer's are 6 and 7
	storeSlot   = segments.NotificationID(0)
	storeRecord = 64 // bytes at offset 0: epoch, process, count; the writer's copy at storeRecord
	storeSize   = 4096
	storeEvery  = 500 * time.Microsecond
	storeParked = 5 * time.Millisecond   // a pause after which the waiter has parked, at first
	maxParked   = 320 * time.Millisecond // the longest such pause (see write)
	storeReport = 100 * time.Millisecond // a writer's count line at most this often
	storeCall   = 50 * time.Millisecond  // bound of one store's calls
	confirmWait = 50 * time.Millisecond  // a suspect that goes on this long is a violation
	// storeWaitBound: a waiter asleep this long with its notification set
	// in its current epoch was not woken (no fault of the chaos suite
	// delays a wake-up that long without a view, which makes the value
	// read as not set).
	storeWaitBound = 20 * time.Second
)

// stores is a job's part in its store injections: every starting rank
// has the segment; one writes, its neighbour may wait.
type stores struct {
	rt   *pgas.Runtime
	list []Store
	have bool // this process created the segment (a promoted spare has none)
	// waiting: the injections (by index in list) whose waiter this
	// process runs.
	waiting map[int]bool

	epoch uint64 // of snap
	snap  []byte // the record as this rank first saw it in epoch

	// A record of an older epoch seen to change, or a notification of
	// an older epoch seen set, since suspect (zero: none): a violation
	// once it goes on (confirmWait). A survivor that read its epoch just
	// before its own Recover ended may write one record with the older
	// epoch in the newer one; its next record, half a millisecond later,
	// carries the newer epoch.
	suspect     time.Time
	suspectRec  []byte
	suspectWhat string
	looks, seen int // checks in epoch, and those that saw a suspect

	bad  atomic.Pointer[error] // a waiter's violation
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func newStores(rt *pgas.Runtime, list []Store) *stores {
	return &stores{rt: rt, list: list, stop: make(chan struct{})}
}

// create creates the store segment (collective, as every rank is given
// the same --inject flags): at the start, and after every restore, where
// a survivor keeps its memory and a promoted spare allocates it, and the
// segment is shared again in the new epoch (its stores go in memory).
func (s *stores) create(ctx context.Context) error {
	if len(s.list) == 0 {
		return nil
	}
	if _, err := s.rt.SegmentCreate(ctx, storeSeg, storeSize, nil); err != nil {
		return err
	}
	s.have = true
	return nil
}

// tick runs after every iteration on every rank: it checks the segment,
// keeps the waiters running, and fires the writers due (fresh: the
// iteration was never completed before; quiet: a promoted spare's first
// iteration, see Job.inject).
func (s *stores) tick(iter int, fresh, quiet bool) error {
	if err := s.check(); err != nil {
		return err
	}
	if !s.have {
		return nil
	}
	s.keepWaiters(iter)
	if !fresh || quiet {
		return nil
	}
	me, size := s.rt.Rank(), s.rt.Size()
	for _, in := range s.list {
		if in.Iter == iter && in.Rank == me {
			s.goFunc(func() { s.write(in, (me+1)%size) })
		}
	}
	return nil
}

// keepWaiters starts the waiter of every injection with one whose
// iteration has come, in whichever process holds the writer's right
// neighbour now: the one that held it at that iteration, or the spare
// that took its rank since (a waiter is a role of the rank, and without
// it in the new process a writer that goes on storing never finds one
// parked: a kill-store-wake whose waiter's rank was lost never fired).
func (s *stores) keepWaiters(iter int) {
	me, size := s.rt.Rank(), s.rt.Size()
	for i, in := range s.list {
		if in.Mode == "" || (in.Rank+1)%size != me || in.Rank == me || iter < in.Iter || s.waiting[i] {
			continue
		}
		if s.waiting == nil {
			s.waiting = map[int]bool{}
		}
		s.waiting[i] = true
		s.goFunc(func() { s.wait(in) })
	}
}

func (s *stores) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// report prints what this rank's checks saw in its epoch.
func (s *stores) report() {
	fmt.Printf("inject: store check rank %d (proc %d): epoch %d: looks=%d older_seen=%d\n", s.rt.Rank(), s.rt.Proc(), s.epoch, s.looks, s.seen)
}

// close stops the writer and the waiter and returns a waiter's violation.
func (s *stores) close() error {
	if s == nil {
		return nil
	}
	s.once.Do(func() {
		close(s.stop)
		if s.snap != nil {
			s.report()
		}
	})
	s.wg.Wait()
	if p := s.bad.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *stores) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// check compares this rank's record with the one it first saw in its
// current epoch: a record of an older epoch that keeps changing since is
// a process of that epoch storing into this rank's memory after its view
// and Recover (the check runs after both); so is a notification of an
// older epoch seen set. Seen once, it is a suspect; seen to go on
// (changing again, with an older epoch, confirmWait later), a violation.
func (s *stores) check() error {
	if p := s.bad.Load(); p != nil {
		return *p
	}
	if !s.have {
		return nil
	}
	seg, err := s.rt.Segment(storeSeg)
	if err != nil {
		return nil // deleted at the end
	}
	rec := seg.Bytes()[:24]
	epoch := s.rt.Epoch()
	if s.snap == nil || s.epoch != epoch {
		if s.snap != nil {
			s.report()
		}
		s.epoch, s.snap, s.suspect, s.looks, s.seen = epoch, slices.Clone(rec), time.Time{}, 1, 0
		fmt.Printf("inject: store check rank %d (proc %d): first look in epoch %d\n", s.rt.Rank(), s.rt.Proc(), epoch)
		return nil
	}
	s.looks++
	e := binary.LittleEndian.Uint64(rec)
	what := ""
	if e < epoch && string(rec) != string(s.snap) {
		what = fmt.Sprintf("its segment changed to a record of epoch %d (process %d, count %d)", e, binary.LittleEndian.Uint64(rec[8:]), binary.LittleEndian.Uint64(rec[16:]))
	}
	if v, err := seg.Notification(storeSlot); err == nil && v != 0 && uint64(v) < epoch {
		what = fmt.Sprintf("a notification set by a writer of epoch %d is seen", v)
	}
	if what != "" {
		s.seen++
	}
	switch {
	case what == "":
		s.suspect = time.Time{}
	case s.suspect.IsZero():
		s.suspect, s.suspectRec, s.suspectWhat = time.Now(), slices.Clone(rec), what
	case time.Since(s.suspect) >= confirmWait && e < epoch && string(rec) != string(s.suspectRec):
		return fmt.Errorf("%w: rank %d: in epoch %d %s, and %v later %s", ErrStoreViolation, s.rt.Rank(), epoch, s.suspectWhat, time.Since(s.suspect).Round(time.Millisecond), what)
	}
	return nil
}

// write is the storm: stores into rank to's segment until the job ends
// or the process does. Every storeReport it prints its counts: stores
// made (calls that returned nil), direct (notifications stored in the
// peer's memory), attempts, and in mode cancel the stores whose context
// had ended by the time the call returned nil, and the wake-ups sent.
func (s *stores) write(in Store, to int) {
	rt := s.rt
	seg, err := rt.Segment(storeSeg)
	if err != nil {
		return
	}
	rank, proc := rt.Rank(), rt.Proc()
	fmt.Printf("inject: store rank %d (proc %d) into rank %d after iteration %d, mode %q: started\n", rank, proc, to, in.Iter, in.Mode)
	var stores, direct, attempts, cancelled uint64
	last := time.Now()
	parked, wakes := storeParked, rt.Stats().Wakes
	report := func() {
		fmt.Printf("inject: store rank %d (proc %d) into rank %d: stores=%d direct=%d attempts=%d cancelled=%d wakes=%d epoch=%d\n",
			rank, proc, to, stores, direct, attempts, cancelled, rt.Stats().Wakes, rt.Epoch())
	}
	defer report()
	for n := uint64(1); !s.stopped(); n++ {
		epoch := rt.Epoch()
		own := seg.Bytes()[storeRecord : storeRecord+24]
		binary.LittleEndian.PutUint64(own, uint64(epoch))
		binary.LittleEndian.PutUint64(own[8:], uint64(proc))
		binary.LittleEndian.PutUint64(own[16:], n)
		ctx, cancel := context.WithTimeout(context.Background(), storeCall)
		if in.Mode == "cancel" {
			cancel()
			if n%2 == 0 { // ends during the call
				ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(20000)))
			}
		}
		before := rt.Stats().DirectNotes
		err := rt.WriteNotify(ctx, storeQueue, to, pgas.Loc{Seg: storeSeg}, pgas.Loc{Seg: storeSeg, Off: storeRecord}, 24, storeSlot, uint32(epoch))
		ended := ctx.Err() != nil
		cancel()
		attempts++
		if err == nil {
			stores++
			if ended {
				cancelled++
			}
			wctx, wcancel := context.WithTimeout(context.Background(), storeCall)
			rt.Wait(wctx, storeQueue)
			wcancel()
		}
		if rt.Stats().DirectNotes > before {
			direct++
		}
		if errors.Is(err, pgas.ErrClosed) {
			return
		}
		if time.Since(last) >= storeReport {
			report()
			last = time.Now()
		}
		pause := storeEvery
		if err != nil {
			pause = 4 * storeEvery
		} else if in.Mode != "" && n%8 == 0 {
			// Long enough for the waiter to stop polling and park, so
			// that the next store must wake it (under the race detector
			// and a busy machine the short pauses alone gave a run with
			// no wake-up at all, and the chaos kind went unproven).
			// Twice as long each time no store woke it since the last:
			// on a machine with several processes per core the waiter's
			// may not run at all for 5 ms, and a kill-store-wake then
			// fired 30 iterations late, or never.
			if w := rt.Stats().Wakes; w != wakes {
				parked, wakes = storeParked, w
			} else if n > 8 {
				parked = min(2*parked, maxParked)
			}
			pause = parked
		}
		select {
		case <-s.stop:
		case <-time.After(pause):
		}
	}
}

// wait is the neighbour's waiter: it waits for the notification, resets
// it, and waits again, until the job ends. A wait that lasted
// storeWaitBound with the notification set in this rank's current epoch
// (the epoch it parked in) is a missed wake-up.
func (s *stores) wait(in Store) {
	rt := s.rt
	seg, err := rt.Segment(storeSeg)
	if err != nil {
		return
	}
	fmt.Printf("inject: store rank %d: waiter on the notification of rank %d's stores (mode %q): started\n", rt.Rank(), in.Rank, in.Mode)
	var woken, timeouts uint64
	errs := map[string]int{}
	defer func() {
		fmt.Printf("inject: store rank %d: waiter woken %d times, %d timeouts, errors %v\n", rt.Rank(), woken, timeouts, errs)
	}()
	for !s.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), storeWaitBound)
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		epoch := rt.Epoch()
		_, err := rt.NotifyWaitSome(ctx, storeSeg, storeSlot, 1)
		timedOut := ctx.Err() != nil && !s.stopped()
		cancel()
		if err == nil {
			woken++
			rt.NotifyReset(storeSeg, storeSlot)
			continue
		}
		if timedOut && rt.Epoch() == epoch {
			if v, err := seg.Notification(storeSlot); err == nil && v != 0 {
				err := fmt.Errorf("%w: rank %d: a waiter slept %v in epoch %d with its notification set (value %d): its wake-up was lost",
					ErrStoreViolation, rt.Rank(), storeWaitBound, epoch, v)
				fmt.Fprintln(os.Stderr, err)
				s.bad.Store(&err)
				return
			}
		}
		if timedOut {
			timeouts++
		}
		if err != nil && !timedOut {
			errs[err.Error()]++
			select {
			case <-s.stop:
			case <-time.After(10 * time.Millisecond): // the segment may be gone at the end
			}
		}
	}
}
