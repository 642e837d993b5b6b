// Package testkit holds nothing itself: its subpackages are the rigs of the
// tests, the real-process tiers and the benchmarks, apart from the runtime
// parts under internal/ (docs/design.md §1.1; internal/archtest keeps every
// runtime part and command off them).
//
//   - proctest: builds the programs a tier runs, reads a job's output
//     with bounded waits, and finds leftover processes.
//   - simhost: simulated hosts (network namespaces on a bridge) with
//     crash, cut and heal.
//   - mhjob: a job across simulated hosts with the bare PGAS_* contract.
//   - procnet: the TCP listeners of a process, from /proc.
//   - script: scenario scripts with golden traces (go test -rewrite).
//   - stats: medians and percentiles for benchmarks and the chaos suite.
package testkit
