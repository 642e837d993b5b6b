package launch

import (
	"bufio"
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

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// fakeConnectorMain stands in for ssh ("fakessh") or srun ("fakesrun",
// fakeStepMain): it parses their command lines as they would, ignores the
// host and runs the remote command here, in a session of its own as sshd or slurmstepd
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
		return fakeStepMain(args)
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
	return proctest.Find(func(_, _ int, argv []string) bool {
		return len(argv) >= 2 && argv[0] == os.Args[0] && argv[1] == "--remote-exec"
	})
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

// fakeStepMain stands in for "srun --ntasks=N --distribution=arbitrary
// --input=all --label ... COMMAND" inside an allocation: it runs N copies
// of COMMAND here, task t with SLURM_PROCID=t, SLURM_STEP_NUM_TASKS=N and
// SLURMD_NODENAME the t-th line of SLURM_HOSTFILE, each in a session of
// its own as slurmstepd would; it copies its stdin to every task, prefixes
// each line of a task's output with "T: " (T padded to the width of N-1)
// with --label, reports a task that exits non-zero or is killed as srun
// does ("srun: error: NODE: task T: Exited with exit code C" or "...:
// Killed"), and exits with the highest task status. It records its argv in
// GASPIRUN_TEST_DIR/fakesrun.argv, its pid in fakesrun.pid and each
// task's pid in fakesrun.task.T.pid. A step of one task on a named node
// (--nodelist=NODE, a replacement's) takes no host file and records its
// argv in fakesrun.NODE.argv instead.
func fakeStepMain(args []string) int {
	ntasks, label, node := 0, false, ""
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		if v, ok := strings.CutPrefix(args[0], "--ntasks="); ok {
			ntasks, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(args[0], "--nodelist="); ok {
			node = v
		}
		label = label || args[0] == "--label"
		args = args[1:]
	}
	hf, err := os.ReadFile(os.Getenv("SLURM_HOSTFILE"))
	hosts := strings.Fields(string(hf))
	record := "fakesrun.argv"
	if node != "" {
		hosts, err, record = []string{node}, nil, "fakesrun."+node+".argv"
	}
	if err != nil || ntasks < 1 || len(hosts) != ntasks || len(args) == 0 {
		fmt.Fprintf(os.Stderr, "srun: error: fakesrun: --ntasks=%d, %d hosts in SLURM_HOSTFILE (%v), command %q\n", ntasks, len(hosts), err, args)
		return 1
	}
	dir := os.Getenv(dirVar)
	os.WriteFile(filepath.Join(dir, record), []byte(strings.Join(os.Args, "\x00")), 0o644)
	if node == "" {
		os.WriteFile(filepath.Join(dir, "fakesrun.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	width := len(strconv.Itoa(ntasks - 1))
	var outMu sync.Mutex
	labelled := func(w io.Writer, t int, r io.Reader, wg *sync.WaitGroup) {
		defer wg.Done()
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				if !strings.HasSuffix(line, "\n") {
					line += "\n"
				}
				outMu.Lock()
				if label {
					fmt.Fprintf(w, "%*d: %s", width, t, line)
				} else {
					io.WriteString(w, line)
				}
				outMu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
	var stdins []io.WriteCloser
	var cmds []*exec.Cmd
	outs := make([]*sync.WaitGroup, ntasks) // a task's output is read before its Wait
	for t := range ntasks {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("SLURM_PROCID=%d", t), fmt.Sprintf("SLURM_STEP_NUM_TASKS=%d", ntasks),
			"SLURMD_NODENAME="+hosts[t])
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		in, _ := cmd.StdinPipe()
		o, _ := cmd.StdoutPipe()
		e, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "srun: error: %s: task %d: %v\n", hosts[t], t, err)
			return 1
		}
		if node == "" {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("fakesrun.task.%d.pid", t)), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
		}
		outs[t] = &sync.WaitGroup{}
		outs[t].Add(2)
		go labelled(os.Stdout, t, o, outs[t])
		go labelled(os.Stderr, t, e, outs[t])
		stdins = append(stdins, in)
		cmds = append(cmds, cmd)
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := os.Stdin.Read(buf)
			for _, in := range stdins {
				if n > 0 {
					in.Write(buf[:n])
				}
			}
			if err != nil {
				for _, in := range stdins {
					in.Close()
				}
				return
			}
		}
	}()
	code := 0
	var waits sync.WaitGroup
	for t, cmd := range cmds {
		waits.Add(1)
		go func() {
			defer waits.Done()
			outs[t].Wait()
			cmd.Wait()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			outMu.Lock()
			defer outMu.Unlock()
			switch {
			case ws.Signaled():
				fmt.Fprintf(os.Stderr, "srun: error: %s: task %d: Killed\n", hosts[t], t)
				code = max(code, 128+int(ws.Signal()))
			case ws.ExitStatus() != 0:
				fmt.Fprintf(os.Stderr, "srun: error: %s: task %d: Exited with exit code %d\n", hosts[t], t, ws.ExitStatus())
				code = max(code, ws.ExitStatus())
			}
		}()
	}
	waits.Wait()
	return code
}
