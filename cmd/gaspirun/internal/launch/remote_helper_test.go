package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeConnectorMain stands in for ssh ("fakessh") or srun ("fakesrun"): it
// parses their command lines as they would, ignores the host and runs the
// remote command here, in a session of its own as sshd or slurmstepd
// would, relaying its stdin, stdout and stderr. Killing it cuts the
// "connection": the remote command's stdin ends and its output has no
// reader. It records its pid and argv in GASPIRUN_TEST_DIR as
// <role>.<host>.pid and <role>.<host>.argv (NUL-separated).
func fakeConnectorMain(role string, args []string) int {
	var host string
	var command []string
	switch role {
	case "fakessh":
		for len(args) > 0 && strings.HasPrefix(args[0], "-") {
			switch args[0] {
			case "-o", "-p", "-i", "-F", "-l", "-J":
				args = args[2:]
			case "-G":
				// ssh -G prints the configuration: every host is this one.
				fmt.Printf("user root\nhostname localhost\nport 22\n")
				return 0
			default:
				args = args[1:]
			}
		}
		if len(args) < 2 {
			fmt.Fprintln(os.Stderr, "fakessh: usage: fakessh [options] host command")
			return 255
		}
		host = args[0]
		command = []string{"/bin/sh", "-c", strings.Join(args[1:], " ")}
	case "fakesrun":
		for len(args) > 0 && strings.HasPrefix(args[0], "-") {
			if v, ok := strings.CutPrefix(args[0], "--nodelist="); ok {
				host = v
			}
			args = args[1:]
		}
		if host == "" || len(args) == 0 {
			fmt.Fprintln(os.Stderr, "fakesrun: no --nodelist or no command")
			return 1
		}
		command = args
	}
	dir := os.Getenv(dirVar)
	os.WriteFile(filepath.Join(dir, role+"."+host+".argv"), []byte(strings.Join(os.Args, "\x00")), 0o644)
	os.WriteFile(filepath.Join(dir, role+"."+host+".pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 255
	}
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 255
	}
	go func() {
		io.Copy(stdin, os.Stdin)
		stdin.Close()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(os.Stdout, stdout) }()
	go func() { defer wg.Done(); io.Copy(os.Stderr, stderr) }()
	wg.Wait()
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if role == "fakessh" {
			return 255
		}
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// fakeConnector writes a script named name (ssh or srun) into a new
// directory that runs this test binary as the fake connector, with dir for
// its records; it returns the script's path.
func fakeConnector(t *testing.T, name, dir string) string {
	t.Helper()
	bin := t.TempDir()
	script := filepath.Join(bin, name)
	body := fmt.Sprintf("#!/bin/sh\n%s=fake%s %s=%s %s exec %s \"$@\"\n", roleVar, name, dirVar, shellJoin([]string{dir}), noRaceExitDelay, shellJoin([]string{os.Args[0]}))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// remoteJob is a job of this test binary's child modes over the fake ssh,
// on hosts h0..h(n-1) with the given slots each.
func remoteJob(t *testing.T, mode string, ranks, spares int, slots ...int) (Config, *watchBuffer, *watchBuffer, string) {
	t.Helper()
	cfg, out, errs := jobConfig(mode, ranks, spares)
	dir := t.TempDir()
	cfg.Launcher = LauncherAuto
	var hf strings.Builder
	hf.WriteString("# test hosts\n")
	for i, s := range slots {
		fmt.Fprintf(&hf, "h%d slots=%d\n", i, s)
	}
	cfg.Hostfile = filepath.Join(dir, "hostfile")
	if err := os.WriteFile(cfg.Hostfile, []byte(hf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.SSH = []string{fakeConnector(t, "ssh", dir)}
	cfg.RemoteCommand = []string{os.Args[0], "--remote-exec"}
	cfg.Env = append(cfg.Env, dirVar+"="+dir)
	return cfg, out, errs, dir
}

// remoteSides lists the pids of this test binary running as
// --remote-exec.
func remoteSides() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) >= 2 && args[0] == os.Args[0] && args[1] == "--remote-exec" && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoRemoteSides fails unless every remote side has ended in time.
func waitNoRemoteSides(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := remoteSides()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote sides still running: %v", left)
		}
		time.Sleep(20 * time.Millisecond) // real processes: poll with a deadline
	}
}

// readPid waits for the pid file dir/name and returns its pid.
func readPid(t *testing.T, dir, name string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err == nil {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file %s", name)
		}
		time.Sleep(10 * time.Millisecond) // real processes: poll with a deadline
	}
}

// tokenOf reads PGAS_TOKEN from a process's environment.
func tokenOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("PGAS_TOKEN=")); ok {
			return string(v)
		}
	}
	t.Fatalf("process %d has no PGAS_TOKEN", pid)
	return ""
}

// argvsWith lists the processes whose argv contains s.
func argvsWith(s string) []string {
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

// filesWith lists the regular files under root (only those right in it
// unless deep), of at most 8 MiB and changed since since, that contain s.
func filesWith(root, s string, since time.Time, deep bool) []string {
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
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil || fi.Size() > 8<<20 || fi.ModTime().Before(since) {
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
