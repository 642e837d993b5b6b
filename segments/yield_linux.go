package segments

import "syscall"

// osYield gives the CPU to another runnable thread or process, if any
// (sched_yield). A variable, for the tests.
var osYield = func() { _, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
