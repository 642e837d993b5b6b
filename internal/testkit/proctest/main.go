package proctest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"
)

// Main is the TestMain of a real-process tier: it builds pkgs (see Build)
// and runs the tests. use receives the directory of the binaries, or, on a
// system without /proc or under -short, a reason for the tests to skip
// themselves.
func Main(m *testing.M, tier string, race bool, pkgs []string, use func(dir string, skip error)) int {
	flag.Parse()
	if runtime.GOOS != "linux" || testing.Short() {
		use("", errors.New("real-process tests need Linux (/proc) and no -short"))
		return m.Run()
	}
	dir, cleanup, err := Build(tier, race, pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	use(dir, nil)
	return m.Run()
}
