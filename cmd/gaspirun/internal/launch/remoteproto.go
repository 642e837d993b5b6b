package launch

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
// gaspirun writes to the remote side's stdin: the line remoteMagic, then
// one line of JSON (remoteHeader: the program, its arguments, its
// environment, the token included), then control lines, one per line:
// "ping" (gaspirun is alive) and "signal N" (send signal N to the
// program's process group; "signal N LIST" in a step, for the processes
// of LIST only). End of stdin, or no line for
// remoteHeader.PingTimeout, means gaspirun or the connection is gone: the
// remote side kills the program's process group.
//
// The remote side relays the program's stdout to its own, and once the
// program has exited (and its process group is killed) writes a status
// line, at the start of a line: statusMark, the header's nonce, then
// "exit N" or "signal N". gaspirun removes that line from the output and
// judges the exit from it, so a killed program (signal 9) is never
// confused with a connection error (ssh's 255) or a program that exits 137.
const (
	remoteMagic = "gaspirun-remote-exec 1"
	statusMark  = "\x1egaspirun-status "
	// maxHeader bounds the header line (the environment goes in it).
	maxHeader = 4 << 20
)

// remoteHeader is what the remote side needs to start the program. It
// travels over stdin, never in an argv, because Env holds the job token.
type remoteHeader struct {
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
	// (stepBackend): the header is the same for all, Proc is -1, and each
	// task is process SLURM_PROCID.
	Step *stepInfo `json:"step,omitempty"`
}

// stepInfo is what differs between the tasks of one step, by process id.
type stepInfo struct {
	Hosts       []string   `json:"hosts"`               // PGAS_HOST
	RanksOnHost []int      `json:"ranks_on_host"`       // for GOMAXPROCS
	Vars        [][]string `json:"rank_vars,omitempty"` // each process's rank variables (job.rankVars)
}

// resolveStep makes h the header of one task of a step: process
// SLURM_PROCID (procID), with its host and PGAS_PROC and PGAS_HOST in its
// environment.
func (h *remoteHeader) resolveStep(procID string) error {
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

// parseSignal parses a control line "signal N" (for this process) or
// "signal N LIST" (for the processes of LIST, e.g. "0-3,7", in a step)
// and says whether it is for process proc.
func parseSignal(line string, proc int) (syscall.Signal, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 || f[0] != "signal" {
		return 0, false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n <= 0 || n >= 65 {
		return 0, false
	}
	if len(f) == 3 {
		ps, err := parseRanges(f[2])
		if err != nil || !slices.Contains(ps, proc) {
			return 0, false
		}
	}
	return syscall.Signal(n), true
}

func (h *remoteHeader) encode() ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(b) > maxHeader {
		return nil, fmt.Errorf("the environment and arguments take %d bytes, more than %d", len(b), maxHeader)
	}
	out := make([]byte, 0, len(remoteMagic)+len(b)+2)
	out = append(out, remoteMagic...)
	out = append(out, '\n')
	out = append(out, b...)
	return append(out, '\n'), nil
}

// readHeader reads the magic line and the header from r.
func readHeader(r *bufio.Reader) (*remoteHeader, error) {
	magic, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("no header on stdin: %v", err)
	}
	if strings.TrimSuffix(magic, "\n") != remoteMagic {
		return nil, fmt.Errorf("stdin does not start with %q (this mode is for gaspirun --hostfile and gaspirun under Slurm, not for use by hand)", remoteMagic)
	}
	line, err := readLimitedLine(r, maxHeader)
	if err != nil {
		return nil, fmt.Errorf("reading the header: %v", err)
	}
	h := &remoteHeader{}
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

// statusLine is the line the remote side ends its stdout with.
func statusLine(nonce string, ex exitInfo) string {
	if ex.Signal != 0 {
		return fmt.Sprintf("%s%s signal %d\n", statusMark, nonce, int(ex.Signal))
	}
	return fmt.Sprintf("%s%s exit %d\n", statusMark, nonce, ex.Code)
}

// parseStatus parses a status line (without its newline) for nonce.
func parseStatus(line, nonce string) (exitInfo, bool) {
	rest, ok := strings.CutPrefix(line, statusMark+nonce+" ")
	if !ok {
		return exitInfo{}, false
	}
	kind, num, ok := strings.Cut(rest, " ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return exitInfo{}, false
	}
	switch {
	case kind == "exit" && n >= 0 && n <= 255:
		return exitInfo{Code: n}, true
	case kind == "signal" && n > 0 && n < 65:
		return exitInfo{Code: -1, Signal: syscall.Signal(n)}, true
	}
	return exitInfo{}, false
}
