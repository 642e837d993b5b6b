package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvOf returns the value of variable name in the environment of process
// pid (from /proc/PID/environ), and false when the process or the
// variable is missing.
func EnvOf(pid int, name string) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
			return string(v), true
		}
	}
	return "", false
}

// ArgvsWith lists the running processes whose argv contains s (case
// folded), as "PID: argv", for a check that a secret never reaches ps.
func ArgvsWith(s string) []string {
	var hits []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(bytes.ToLower(b), []byte(strings.ToLower(s))) {
			hits = append(hits, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return hits
}

// FilesWith lists the regular files under root that contain s (case
// folded): those right in root, or in its whole tree when deep, changed
// since since and of at most 8 MiB (a shared directory such as /tmp holds
// other people's large files).
func FilesWith(root, s string, since time.Time, deep bool) []string {
	var hits []string
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if !deep && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > 8<<20 || fi.ModTime().Before(since) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(bytes.ToLower(b), []byte(strings.ToLower(s))) {
			hits = append(hits, path)
		}
		return nil
	})
	return hits
}

// Find lists the running processes (zombies excluded) for which match,
// given the pid, the parent's pid and the argv, returns true.
func Find(match func(pid, ppid int, argv []string) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The state and the parent follow the parenthesised command name.
		i := bytes.LastIndexByte(st, ')')
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if match(pid, ppid, strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
