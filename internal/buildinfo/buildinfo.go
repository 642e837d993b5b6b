// Package buildinfo names the build of a program of the project, for
// --version.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// stamp is the version a build script sets (deploy/build.sh: go build
// -ldflags "-X .../internal/buildinfo.stamp=$(git describe ...)"), for
// builds without the module's version or the VCS's stamp.
var stamp string

// Version is the line a program of the project prints for --version: its
// name, its version and the Go toolchain that built it. The version is
// stamp when set, else the module's (a build of a tagged module), else
// "devel" with the commit a work tree was built at (and "-dirty" for one
// with changes), else "devel".
func Version(program string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", program, version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func version() string {
	if stamp != "" {
		return stamp
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	v, rev, dirty := "devel", "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		v += "+" + rev[:min(12, len(rev))]
		if dirty {
			v += "-dirty"
		}
	}
	return v
}
