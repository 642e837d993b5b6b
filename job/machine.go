package job

import (
	"os"
	"strings"
	"sync"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// One machine, several host labels. The readers' polling (autoTCPSpin,
// autoSpin) pays only when every process on the machine's CPUs has one of
// its own, and a host label need not say which processes share them:
// simulated hosts (network namespaces of one machine) and pods on one
// node each have a label of their own. Four simulated hosts of one
// process each on 2 CPUs each thought they had two CPUs, polled, and
// took 891 µs a barrier, 387 without polling (bench/mpi -hosts 4
// -per-host 1). So each process publishes the running kernel's boot id
// (Extra "machine"), the same in every namespace and container of a
// machine, and the choice counts the members that published the same
// one, with those of this host label that published none.

// machineExtra is the member table's entry for the kernel's boot id.
const machineExtra = "machine"

// bootIDPath holds the running kernel's boot id (Linux).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// maxMachineID bounds the id a process publishes (a boot id has 36
// bytes); a longer one is left out.
const maxMachineID = 64

// thisMachine is this machine's id, "" where the system has none.
var thisMachine = sync.OnceValue(func() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// publishMachine adds the machine id to a member entry's extra.
func publishMachine(extra map[string]string, id string) {
	if id != "" && len(id) <= maxMachineID {
		extra[machineExtra] = id
	}
}

// machineMembers counts the members of table that share this machine
// (id, "" when unknown): those that published id, and those of host,
// this process's label, that published no id. Without an id, the members
// of host.
func machineMembers(table bootstrap.Table, host, id string) int {
	n := 0
	for _, m := range table.Members {
		mid := m.Extra[machineExtra]
		if (id != "" && mid == id) || ((id == "" || mid == "") && m.Host == host) {
			n++
		}
	}
	return n
}
