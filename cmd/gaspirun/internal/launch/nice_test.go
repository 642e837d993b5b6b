package launch

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Rule (backend.go, oversubscribedNice): a local job of more than four
// processes per core starts them ten levels nicer than gaspirun, every
// thread of them; a smaller job starts them as gaspirun runs.
func TestChildNice(t *testing.T) {
	for _, c := range []struct{ procs, cpus, want int }{
		{4, 1, 0}, {5, 1, oversubscribedNice}, {8, 2, 0}, {9, 2, oversubscribedNice}, {2050, 2, oversubscribedNice}, {3, 0, 0},
	} {
		if got := childNice(c.procs, c.cpus); got != c.want {
			t.Errorf("childNice(%d procs, %d cpus) = %d, want %d", c.procs, c.cpus, got, c.want)
		}
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program on PATH (coreutils)")
	}
	own := niceOf(t, os.Getpid())
	for _, add := range []int{0, 5} {
		b := &localBackend{path: sleep, args: []string{"5"}, nice: add}
		cmd := exec.Command(sleep, "5")
		if err := b.spawn(cmd); err != nil {
			t.Fatal(err)
		}
		got := niceOf(t, cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Wait()
		b.close()
		if want := min(own+add, 19); got != want {
			t.Errorf("nice %d: the process runs at niceness %d, want %d (gaspirun's %d + %d)", add, got, want, own, add)
		}
	}
}

// niceOf is process pid's niceness, from /proc (the 19th field of stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatalf("stat of %d: %q", pid, s)
	}
	return n
}
