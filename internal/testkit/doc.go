// Package testkit holds nothing itself: its subpackages are the rigs of the
// tests, the real-process tiers and the benchmarks, apart from the runtime
// parts under internal/ (docs/design.md §1.1; internal/archtest keeps every
// runtime part and command off them).
//
//   - proctest: builds the programs a tier runs, and the one job runner
//     (Job: starts the processes, records each output line with its time
//     and process, WaitLine, Wait with a bound, exit status, Kill), with
//     Procs and Leftovers to check that every process ended by itself.
//   - simhost: simulated hosts (network namespaces on a bridge) with
//     crash, cut and heal.
//   - mhjob: a job across simulated hosts with the bare PGAS_* contract,
//     on proctest's runner.
//   - hostfault: the host scenarios (crash, rendezvous host crash, cut
//     off, cut and healed) that every multi-host launcher's tier runs.
//   - procnet: the TCP listeners of a process, from /proc.
//   - memnet: a network for package spares's membership nodes inside one
//     process (spares.Config.Network), with cut links and message counts.
//   - script: scenario scripts with golden traces (go test -rewrite).
//   - stats: medians and percentiles for benchmarks and the chaos suite.
package testkit
