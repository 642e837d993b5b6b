package remote

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The protocol between gaspirun and its remote side, "gaspirun
// --remote-exec", run on a host through ssh or srun.
//
// gaspirun writes to the remote side's stdin: the line Magic, then one
// line of JSON (Header: the program, its arguments, its environment, the
// token included), then control lines, one per line: PingLine (gaspirun
// is alive) and SignalLine's "signal N" (send signal N to the program's
// process group; "signal N LIST" in a step, for the processes of LIST
// only). End of stdin, or no line for Header.PingTimeout, means gaspirun
// or the connection is gone: the remote side kills the program's process
// group.
//
// The remote side relays the program's stdout to its own, and once the
// program has exited (and its process group is killed) writes a status
// line, at the start of a line: StatusMark, the header's nonce, then
// "exit N" or "signal N". gaspirun removes that line from the output and
// judges the exit from it, so a killed program (signal 9) is never
// confused with a connection error (ssh's 255) or a program that exits 137.
const (
	Magic      = "gaspirun-remote-exec 1"
	StatusMark = "\x1egaspirun-status "
	// MaxHeader bounds the header line (the environment goes in it).
	MaxHeader = 4 << 20
	// PingLine is the control line that says gaspirun is alive.
	PingLine = "ping\n"
)

// MaxProcs caps the processes of one job (ranks plus spares), and so the
// process ids a signal line may list.
const MaxProcs = 4096

// Header is what the remote side needs to start the program. It travels
// over stdin, never in an argv, because Env holds the job token.
type Header struct {
	Proc        int           `json:"proc"`
	Host        string        `json:"host"`
	Nonce       string        `json:"nonce"`
	Dir         string        `json:"dir,omitempty"`
	Program     string        `json:"program"`
	Args        []string      `json:"args"`
	Env         []string      `json:"env"`
	RanksOnHost int           `json:"ranks_on_host"`
	PingTimeout time.Duration `json:"ping_timeout"`
	Grace       time.Duration `json:"grace"`
	// Step is set when every process runs as a task of one srun step
	// (gaspirun's step back end): the header is the same for all, Proc is
	// -1, and each task is process SLURM_PROCID.
	Step *StepInfo `json:"step,omitempty"`
}

// StepInfo is what differs between the tasks of one step, by process id.
type StepInfo struct {
	Hosts       []string   `json:"hosts"`               // PGAS_HOST
	RanksOnHost []int      `json:"ranks_on_host"`       // for GOMAXPROCS
	Vars        [][]string `json:"rank_vars,omitempty"` // each process's rank variables
}

// ResolveStep makes h the header of one task of a step: process
// SLURM_PROCID (procID), with its host and PGAS_PROC and PGAS_HOST in its
// environment.
func (h *Header) ResolveStep(procID string) error {
	st := h.Step
	if len(st.Hosts) == 0 || len(st.RanksOnHost) != len(st.Hosts) {
		return fmt.Errorf("bad header: step of %d hosts and %d rank counts", len(st.Hosts), len(st.RanksOnHost))
	}
	p, err := strconv.Atoi(strings.TrimSpace(procID))
	if err != nil || p < 0 || p >= len(st.Hosts) {
		return fmt.Errorf("SLURM_PROCID=%q is not a task of this step (0..%d); run through gaspirun under Slurm", procID, len(st.Hosts)-1)
	}
	h.Proc, h.Host, h.RanksOnHost = p, st.Hosts[p], st.RanksOnHost[p]
	h.Env = append(h.Env, "PGAS_PROC="+strconv.Itoa(p), "PGAS_HOST="+h.Host)
	if p < len(st.Vars) {
		h.Env = append(h.Env, st.Vars[p]...)
	}
	return nil
}

// SignalLine is the control line that asks for sig: for the process at
// the other end when procs is "", else for the processes procs lists as
// ranges ("0-3,7", in a step).
func SignalLine(sig syscall.Signal, procs string) []byte {
	if procs == "" {
		return fmt.Appendf(nil, "signal %d\n", int(sig))
	}
	return fmt.Appendf(nil, "signal %d %s\n", int(sig), procs)
}

// ParseSignal parses a control line "signal N" (for this process) or
// "signal N LIST" (for the processes of LIST, e.g. "0-3,7", in a step)
// and says whether it is for process proc.
func ParseSignal(line string, proc int) (syscall.Signal, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 || f[0] != "signal" {
		return 0, false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n <= 0 || n >= 65 {
		return 0, false
	}
	if len(f) == 3 {
		ps, err := ParseRanges(f[2])
		if err != nil || !slices.Contains(ps, proc) {
			return 0, false
		}
	}
	return syscall.Signal(n), true
}

// ParseRanges parses "0-3,7,9-12", a list of numbers as ranges.
func ParseRanges(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		c, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || c < a || c-a > MaxProcs {
			return nil, fmt.Errorf("bad range %q", part)
		}
		for n := a; n <= c; n++ {
			out = append(out, n)
		}
		if len(out) > MaxProcs {
			return nil, fmt.Errorf("more than %d numbers", MaxProcs)
		}
	}
	return out, nil
}

// Encode is h as the remote side reads it: the magic line and the header.
func (h *Header) Encode() ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxHeader {
		return nil, fmt.Errorf("the environment and arguments take %d bytes, more than %d", len(b), MaxHeader)
	}
	out := make([]byte, 0, len(Magic)+len(b)+2)
	out = append(out, Magic...)
	out = append(out, '\n')
	out = append(out, b...)
	return append(out, '\n'), nil
}

// ReadHeader reads the magic line and the header from r.
func ReadHeader(r *bufio.Reader) (*Header, error) {
	magic, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("no header on stdin: %v", err)
	}
	if strings.TrimSuffix(magic, "\n") != Magic {
		return nil, fmt.Errorf("stdin does not start with %q (this mode is for gaspirun --hostfile and gaspirun under Slurm, not for use by hand)", Magic)
	}
	line, err := readLimitedLine(r, MaxHeader)
	if err != nil {
		return nil, fmt.Errorf("reading the header: %v", err)
	}
	h := &Header{}
	if err := json.Unmarshal(line, h); err != nil {
		return nil, fmt.Errorf("bad header: %v", err)
	}
	if h.Program == "" || h.Nonce == "" {
		return nil, fmt.Errorf("bad header: no program or nonce")
	}
	return h, nil
}

func readLimitedLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("line longer than %d bytes", limit)
		}
		switch err {
		case nil:
			return line[:len(line)-1], nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Status is how the program at the other end ended.
type Status struct {
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // 0 when it exited
}

// ShellCode is the status a shell would report: 128+N for signal N.
func (s Status) ShellCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

// StatusLine is the line the remote side ends its stdout with.
func StatusLine(nonce string, s Status) string {
	if s.Signal != 0 {
		return fmt.Sprintf("%s%s signal %d\n", StatusMark, nonce, int(s.Signal))
	}
	return fmt.Sprintf("%s%s exit %d\n", StatusMark, nonce, s.Code)
}

// ParseStatus parses a status line (without its newline) for nonce.
func ParseStatus(line, nonce string) (Status, bool) {
	rest, ok := strings.CutPrefix(line, StatusMark+nonce+" ")
	if !ok {
		return Status{}, false
	}
	kind, num, ok := strings.Cut(rest, " ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return Status{}, false
	}
	switch {
	case kind == "exit" && n >= 0 && n <= 255:
		return Status{Code: n}, true
	case kind == "signal" && n > 0 && n < 65:
		return Status{Code: -1, Signal: syscall.Signal(n)}, true
	}
	return Status{}, false
}
