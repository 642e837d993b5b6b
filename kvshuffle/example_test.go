package kvshuffle_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// Word count on two ranks in one process (over transport/mem): every rank
// sends its words with no destination, then reads its share of the keys,
// grouped.
func Example() {
	const n = 2
	nw := mem.NewNetwork(n, mem.DefaultConfig())
	defer nw.Close()
	words := [][]string{{"to", "be", "or"}, {"not", "to", "be"}}
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			cfg := pgas.LocalConfig()
			cfg.Proc, cfg.NumProcs, cfg.NumRanks = transport.Proc(i), n, n
			cfg.Transport = nw.Endpoint(transport.Proc(i))
			rt, err := pgas.Init(ctx, cfg)
			if err != nil {
				panic(err)
			}
			defer rt.Close()
			sh, err := kvshuffle.New(ctx, rt, kvshuffle.LocalConfig())
			if err != nil {
				panic(err)
			}
			defer sh.Close()
			for _, w := range words[i] {
				if err := sh.Send(ctx, []byte(w), nil); err != nil {
					panic(err)
				}
			}
			if err := sh.CloseSend(ctx); err != nil {
				panic(err)
			}
			for k, vals := range sh.Groups(ctx) {
				c := 0
				for range vals {
					c++
				}
				mu.Lock()
				lines = append(lines, fmt.Sprintf("%s %d", k, c))
				mu.Unlock()
			}
			if err := sh.Err(); err != nil {
				panic(err)
			}
			// Finalize after both ranks are done with the shuffle.
			if err := rt.Barrier(ctx, nil); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// be 2
	// not 1
	// or 1
	// to 2
}
