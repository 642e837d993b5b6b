// Command ring is a small SPMD program used by the real-process tests: each
// rank writes a block to its right neighbour with a notification, checks
// what its left neighbour wrote, and all ranks agree on a sum.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := pgas.InitFromEnv(ctx, pgas.EnvOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	defer rt.Close()
	if err := run(ctx, rt); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rt.Rank(), err)
		os.Exit(2)
	}
}

func run(ctx context.Context, rt *pgas.Runtime) error {
	me, n := rt.Rank(), rt.Size()
	const size = 1 << 20
	seg, err := rt.SegmentCreate(ctx, 1, 2*size, nil)
	if err != nil {
		return err
	}
	src := seg.Bytes()[size:]
	for i := range src {
		src[i] = byte(me*31 + i)
	}
	right, left := (me+1)%n, (me+n-1)%n
	if err := rt.WriteNotify(ctx, 0, right, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: size}, size, 1, uint32(me+1)); err != nil {
		return err
	}
	if err := rt.Wait(ctx, 0); err != nil {
		return err
	}
	if _, err := rt.NotifyWaitSome(ctx, 1, 1, 1); err != nil {
		return err
	}
	if v, _ := rt.NotifyReset(1, 1); v != uint32(left+1) {
		return fmt.Errorf("notification %d, want %d", v, left+1)
	}
	for i, b := range seg.Bytes()[:size] {
		if b != byte(left*31+i) {
			return fmt.Errorf("byte %d from rank %d is %d", i, left, b)
		}
	}
	sum := []float64{float64(me)}
	if err := pgas.Allreduce(ctx, rt, nil, sum, pgas.OpSum); err != nil {
		return err
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	fmt.Printf("rank %d of %d ok sum=%g\n", me, n, sum[0])
	if code := os.Getenv("RING_EXIT_RANK"); code != "" && fmt.Sprint(me) == code {
		os.Exit(3)
	}
	return nil
}
