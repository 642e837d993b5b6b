// Package buildinfo names the build of a program of the project, for
// --version.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the line a program of the project prints for --version: its
// name, the module's version (devel for a build from a work tree) and the
// Go toolchain that built it.
func Version(program string) string {
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("%s %s (%s %s/%s)", program, v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
