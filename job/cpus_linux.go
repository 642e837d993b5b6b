//go:build linux

package job

import "golang.org/x/sys/unix"

// affinity returns the ids of the CPUs this process may run on,
// ascending, or nil when the kernel does not tell (more CPUs than
// unix.CPUSet holds).
func affinity() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var ids []int
	for i := range 1024 { // unix.CPUSet's size; IsSet is false beyond it
		if set.IsSet(i) {
			ids = append(ids, i)
		}
	}
	return ids
}
