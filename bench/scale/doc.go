// Package scale measures how the runtime's costs grow with the number of
// ranks N, in one process: N ranks over transport/mem, with the real pgas
// runtime, the real failure detector (package health), the real
// checkpoints (package ckpt) and a membership that turns a confirmed
// failure into a view at once (pgastest), under testing/synctest fake
// time. Messages, bytes, rounds and allocations are counted; fake time is
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
