// Package transporttest is the conformance suite for transport.Transport
// implementations, plus a recording Handler for tests of the layers above,
// and what the transports' own tests share: NewCluster (transports that
// know each other's addresses), StartAll, Context and Errors.
//
// Every transport runs the suite from its own tests:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T, n int) []transport.Transport {
//			ts := newTransports(t, n) // procs 0..n-1, able to reach each other, not started
//			t.Cleanup(func() { closeAll(ts) })
//			return ts
//		})
//	}
//
// Run starts one subtest per Case. A transport that must run each case in
// its own environment (a testing/synctest bubble, where T.Run is not
// allowed) iterates over Cases itself:
//
//	for _, c := range transporttest.Cases() {
//		t.Run(c.Name, func(t *testing.T) {
//			synctest.Test(t, func(t *testing.T) { c.Test(t, factory) })
//		})
//	}
//
// Each case states the rule of the transport package contract
// (transport/doc.go) that it checks. The cases use real deadlines of
// Timeout, generous enough for TCP on a busy machine; inside a synctest
// bubble the clock is fake and they cost nothing.
//
// Concurrency: a Factory is called from the test goroutine. Handlers built
// by the suite record failures and report them from the test goroutine, so
// they never call t.Fatal from a transport's goroutine. A Recorder is safe
// for concurrent use.
package transporttest
