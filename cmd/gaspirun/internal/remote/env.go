package remote

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// IsContractVar reports whether k is one of the variables gaspirun sets
// for each process: neither gaspirun's own environment nor a remote
// login's passes them on.
func IsContractVar(k string) bool {
	switch k {
	case "PGAS_PROC", "PGAS_NPROCS", "PGAS_NRANKS", "PGAS_SPARES", "PGAS_RENDEZVOUS", "PGAS_TOKEN",
		"PGAS_HOST", "PGAS_JOB_ID", "PGAS_STATE_DIR", "PGAS_SERVE_RENDEZVOUS", "PGAS_RESUME", "PGAS_TLS", "PGAS_JOIN", "PGAS_RACKS":
		return true
	}
	return false
}

// MergeEnviron is a process's environment: base without the contract's
// variables (PGAS_LOG, PGAS_ADVERTISE_HOST and the like pass through),
// then GOMAXPROCS (each rank's share of cpus) unless base or env sets it,
// then env.
func MergeEnviron(base, env []string, cpus, ranksOnHost int) []string {
	var out []string
	userProcs := false
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if IsContractVar(k) {
			continue
		}
		userProcs = userProcs || k == "GOMAXPROCS"
		out = append(out, kv)
	}
	for _, kv := range env {
		userProcs = userProcs || strings.HasPrefix(kv, "GOMAXPROCS=")
	}
	if !userProcs {
		out = append(out, "GOMAXPROCS="+strconv.Itoa(procsPerRank(cpus, ranksOnHost)))
	}
	return append(out, env...)
}

// procsPerRank is each rank's share of the cores (at least 1), given to a
// child as GOMAXPROCS unless the user set one. Ranks that each run as many
// Go threads as there are cores oversubscribe the host: a message then
// wakes a goroutine on another thread, which cost a small write+notify
// round trip 2x (gaspibench: 53-57 us against 21-24 us with one thread per
// rank, with 2 ranks on 2 cores).
func procsPerRank(cpus, ranks int) int {
	return max(1, cpus/max(1, ranks))
}

// StatusOf is how a process that has been waited for ended.
func StatusOf(ps *os.ProcessState) Status {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Status{Code: -1, Signal: ws.Signal()}
	}
	return Status{Code: ps.ExitCode()}
}
