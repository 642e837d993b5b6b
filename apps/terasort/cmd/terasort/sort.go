package main

// ---------------------------------------------------------------------------
// terasort sort: the distributed sort, built on kvshuffle.
//
// This is the seam where the distributed TeraSort plugs in. It runs under
// gaspirun (one process per rank): each rank reads its share of --in, the
// ranks agree on splitters (terasort.SampleFiles on each rank, allgather,
// terasort.Splitters, terasort.NewPartitioner), send every record to
// Partition(Key(rec)) through the key-value shuffle, and rank r writes its
// sorted partition to --out/part-NNNNN (terasort.PartName(r)), so that
// `terasort validate --expect-checksum <input's> OUT` checks the result.
// Until that is wired, the command says so and exits with status 2.
// ---------------------------------------------------------------------------

import (
	"context"
	"io"
)

func cmdSort(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, _, _, _ = ctx, args, stdout, stderr
	return &exitError{code: 2, msg: "built on kvshuffle (see apps/terasort/doc.go)"}
}
