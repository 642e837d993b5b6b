package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
	"github.com/gaspigo/gaspigo/internal/buildinfo"
)

const synopsis = `usage: gaspirun -n N [flags] [--] PROGRAM [ARGS...]
       gaspirun -n N --host HOST[:SLOTS],... | --hostfile FILE [flags] [--] PROGRAM [ARGS...]
       gaspirun [-n N] --spares K [flags] [--] PROGRAM [ARGS...]   (inside sbatch or salloc)
       gaspirun --new-token | --version | --help

Runs N processes of PROGRAM, plus --spares K spare processes that take over
a failed rank of a gaspigo job: on this machine, on the hosts of --host or a
hostfile through ssh, or on the nodes of a Slurm allocation through srun.
Any program runs, as under mpirun. Each output line is prefixed with its
process's role: [r2] for rank 2, [s5] for spare process 5. gaspirun's flags
go before PROGRAM. See 'go doc github.com/gaspigo/gaspigo/cmd/gaspirun' for
the launchers, the environment the processes get and the exit codes.
`

// helpSections orders the flags the help shows. Every flag appears in one
// section, but aliases (shown beside their flag) and deprecated ones.
var helpSections = []struct {
	title string
	flags []string
}{
	{"Job", []string{"n", "spares", "respawn", "max-restarts", "refill-wait", "join-env", "timeout", "on-death", "grace", "job-id", "state-dir", "resume", "x", "tls"}},
	{"Hosts and launchers", []string{"host", "hostfile", "launcher", "ssh", "srun", "rendezvous-addr", "remote-gaspirun", "host-labels", "ranks-per-host", "racks"}},
	{"Output", []string{"quiet", "v", "stdin", "output-filename", "collapse", "metrics", "metrics-file", "metrics-linger", "trace"}},
	{"Other", []string{"new-token", "version", "help"}},
}

// writeHelp prints the synopsis and every flag, written as gaspirun takes
// them (-n, --spares), by section.
func writeHelp(w io.Writer) {
	cfg := launch.DefaultConfig()
	fs := newFlagSet(&cfg, &flagVars{})
	var b strings.Builder
	b.WriteString(synopsis)
	for _, sec := range helpSections {
		fmt.Fprintf(&b, "\n%s:\n", sec.title)
		for _, name := range sec.flags {
			f := fs.Lookup(name)
			arg, usage := flag.UnquoteUsage(f)
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
				arg = ""
			}
			names := []string{dash(name)}
			for alias, of := range aliases {
				if of == name {
					names = append(names, dash(alias))
				}
			}
			head := "  " + strings.Join(names, ", ")
			if arg != "" {
				head += " " + arg
			}
			if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" {
				usage += " (default " + d + ")"
			}
			b.WriteString(head + "\n")
			for _, l := range wrap(usage, 72) {
				b.WriteString("        " + l + "\n")
			}
		}
	}
	io.WriteString(w, b.String())
}

// wrap breaks s into lines of at most width bytes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// version is gaspirun's version line: the main module's version from the
// build information ("devel" for a build from a source tree), and Go's.
func version() string { return buildinfo.Version("gaspirun") }
