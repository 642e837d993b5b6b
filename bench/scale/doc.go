// Package scale measures how the runtime's costs grow with the number of
// ranks N, in one process: N ranks over transport/mem, with the real pgas
// runtime, the real failure detector (package health), the real
// checkpoints (package ckpt) and the real membership (package spares:
// Raft among the voters, the other processes clients of its tree, over a
// internal/testkit/memnet), under testing/synctest fake time. Above -scale.real
// ranks (65,536 by default) the membership is pgastest's, which turns a
// confirmed failure into a view at once. The tables that are the same on
// every rank (views, size tables, checkpoint layouts, the membership's
// process and rank tables and tree) are shared within the process
// (docs/design.md §13), so the heap per rank does not grow with N. A
// kill at 65,536 peaks at 22 GB of RSS, so on a machine of 24 GB run it
// with a memory limit (bench/RESULTS.md; the row is logged before the
// job closes, which takes longer than the rest: stop it there):
//
//	go test -c -o /tmp/scale.test ./bench/scale && cd bench/scale
//	GOMEMLIMIT=19GiB /usr/bin/time -v /tmp/scale.test -test.run 'TestScaleTable$' -scale.n=65536 -test.v -test.timeout 300m
//
// Every data-plane frame takes one hop (100 µs) of fake time, so fake
// time counts rounds. Messages, bytes, rounds and allocations are
// counted; fake time is
// what the protocols' timers make of them; wall time on 2 cores is a
// second check. Everything is in its tests:
//
//	go test ./bench/scale -run TestScaleSample               # N = 1,024: what CI checks
//	go test ./bench/scale -run TestScaleTable -scale.n=64,256,1024,4096,16384 -timeout 60m -v
//	go test ./bench/scale -run TestScaleTable -scale.n=256,1024 -scale.killleader -v  # kill the Raft leader's rank
//	go test ./bench/scale -run TestWallClock -scale.wall=4096 -v   # real time, no membership
//
// bench/scale/run.sh runs the table and the wall-clock figures with the
// load average printed beside them.
package scale
