// Package benchutil holds what the benchmark programs under bench/ share:
// the start of a program that needs simulated hosts, and the names of
// message sizes in their tables, and their -n flag of process counts.
package benchutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// HostsAndBinaries is the start of a benchmark over simulated hosts: it
// exits with a message naming prog when this machine cannot make them
// (root, iproute2) or the packages pkgs do not build, and otherwise
// returns the directory of their binaries and its cleanup.
func HostsAndBinaries(prog string, pkgs ...string) (dir string, cleanup func()) {
	if reason := simhost.Unavailable(); reason != "" {
		fmt.Fprintln(os.Stderr, prog+":", reason)
		os.Exit(1)
	}
	dir, cleanup, err := proctest.Build(prog, false, pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(1)
	}
	return dir, cleanup
}

// SizeName names a message size for a table: "-" for 0, else B, KiB or
// MiB when the size is a whole number of them.
func SizeName(n int) string {
	switch {
	case n == 0:
		return "-"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

// Counts parses a -n flag of comma-separated process counts, each at
// least least; the error names the flag and the bad entry.
func Counts(s string, least int) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("-n: %q is not a process count of %d or more", f, least)
		}
		counts = append(counts, n)
	}
	return counts, nil
}
