package spares

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/script"
)

// TestScenarios runs the scripts testdata/*.txt through state.apply and
// compares the trace with testdata/*.golden (go test -run TestScenarios
// -rewrite regenerates them). Script language, one step per line, several
// steps on one line separated by ';' happen in the same detection interval
// (every report on the line carries the epoch the line started in, and
// "rank R" is resolved in that view):
//
//	init ranks=R spares=S [hosts=H] [shrink] [refill=D]
//	                         procs 0..R-1 hold ranks, R..R+S-1 are spares;
//	                         refill: RefillWait (a Go duration)
//	fail P [by=Q] [at=E]     declareFailed of proc P by Q (default: none) reported in epoch E
//	fail rank R ...          fail the proc holding rank R
//	fail spare P ...         fail proc P, which must be a spare
//	exhaust                  fail the lowest live rank until the job stops running
//	add P [host=H]           addSpare
//	endwait R [since=E]      endWait of rank R's wait since E (default: the
//	                         wait the interval's view shows, else its epoch)
//	finish | voters P...
//
// Every step is also checked for: the state invariants, the command's
// encode/decode round trip, and idempotence (applying it again is a no-op
// that leaves the state unchanged).
func TestScenarios(t *testing.T) {
	script.Test(t, "testdata/*.txt", func(t *testing.T) script.Interpreter { return &scenario{t: t} })
}

type scenario struct {
	t   *testing.T
	st  *state
	out io.Writer // the trace
}

// Exec runs one line of steps, then prints the view.
func (s *scenario) Exec(out io.Writer, c script.Cmd) error {
	s.out = out
	if err := s.line(c.Text); err != nil {
		return err
	}
	if s.st != nil {
		fmt.Fprintf(out, "  view: %s\n", summarize(s.st))
	}
	return nil
}

func (s *scenario) line(line string) error {
	steps := strings.Split(line, ";")
	if strings.HasPrefix(steps[0], "init") {
		return s.init(strings.Fields(steps[0])[1:])
	}
	if s.st == nil {
		return fmt.Errorf("script must start with init")
	}
	view := s.st.Clone() // the interval's view: every report on this line was made in it
	for _, step := range steps {
		f := strings.Fields(step)
		if len(f) == 0 {
			return fmt.Errorf("empty step")
		}
		switch f[0] {
		case "fail":
			cmd, note, err := parseFail(&view, f[1:])
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintf(s.out, "  %s\n", note)
				continue
			}
			s.apply(cmd)
		case "exhaust":
			for s.st.Status == statusRunning {
				r := slices.IndexFunc(s.st.Ranks.slice(), func(p uint32) bool { return p != noProc })
				s.apply(declareFailed{Proc: s.st.Ranks.at(r), Reporter: noProc, Epoch: s.st.Epoch})
			}
		case "add":
			if len(f) < 2 {
				return fmt.Errorf("add needs a proc")
			}
			p, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				return err
			}
			host := "hx"
			for _, kv := range f[2:] {
				if v, ok := strings.CutPrefix(kv, "host="); ok {
					host = v
				}
			}
			s.apply(addSpare{Proc: uint32(p), Info: infoFor(uint32(p), host)})
		case "endwait":
			cmd, err := parseEndWait(&view, f[1:])
			if err != nil {
				return err
			}
			s.apply(cmd)
		case "finish":
			s.apply(finish{})
		case "voters":
			var v []uint32
			for _, a := range f[1:] {
				p, err := strconv.ParseUint(a, 10, 32)
				if err != nil {
					return err
				}
				v = append(v, uint32(p))
			}
			s.apply(setVoters{Voters: v})
		default:
			return fmt.Errorf("unknown step %q", f[0])
		}
	}
	return nil
}

func (s *scenario) init(args []string) error {
	ranks, spares, hosts, shrink, refill := 0, 0, 1, false, time.Duration(0)
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "refill":
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("bad %q: %v", a, err)
			}
			refill = d
		case "ranks":
			ranks = n
		case "spares":
			spares = n
		case "hosts":
			hosts = n
		case "shrink":
			shrink = true
		default:
			return fmt.Errorf("unknown init argument %q", a)
		}
	}
	st, err := initialState(testMembers(ranks, spares, hosts), ranks, shrink, refill, 5)
	if err != nil {
		return err
	}
	s.st = &st
	return nil
}

func infoFor(p uint32, host string) procInfo {
	return procInfo{Addr: fmt.Sprintf("%s:d%d", host, p), Host: host, RaftAddr: fmt.Sprintf("%s:r%d", host, p), CtlAddr: fmt.Sprintf("%s:c%d", host, p)}
}

func testMembers(ranks, spares, hosts int) []Member {
	var ms []Member
	for i := 0; i < ranks+spares; i++ {
		h := fmt.Sprintf("h%d", i%hosts)
		info := infoFor(uint32(i), h)
		ms = append(ms, Member{Proc: uint32(i), Host: h, Addr: info.Addr, RaftAddr: info.RaftAddr, CtlAddr: info.CtlAddr, Spare: i >= ranks})
	}
	return ms
}

// parseFail resolves a fail step in the interval's view. A non-empty note
// means the step is refused by the script (e.g. "fail spare" of a non-spare).
func parseFail(view *state, args []string) (command, string, error) {
	cmd := declareFailed{Reporter: noProc, Epoch: view.Epoch}
	mode := ""
	if len(args) > 0 && (args[0] == "rank" || args[0] == "spare") {
		mode, args = args[0], args[1:]
	}
	if len(args) == 0 {
		return nil, "", fmt.Errorf("fail needs a target")
	}
	n, err := strconv.ParseUint(args[0], 10, 32)
	if err != nil {
		return nil, "", err
	}
	switch mode {
	case "rank":
		p, ok := view.ProcOf(int(n))
		if !ok {
			return nil, fmt.Sprintf("rank %d is vacant in epoch %d: nothing to report", n, view.Epoch), nil
		}
		cmd.Proc = p
	case "spare":
		if !view.IsSpare(uint32(n)) {
			return nil, fmt.Sprintf("proc %d is not a spare in epoch %d", n, view.Epoch), nil
		}
		cmd.Proc = uint32(n)
	default:
		cmd.Proc = uint32(n)
	}
	for _, kv := range args[1:] {
		k, v, _ := strings.Cut(kv, "=")
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("bad %q: %v", kv, err)
		}
		switch k {
		case "by":
			cmd.Reporter = uint32(x)
		case "at":
			cmd.Epoch = x
		default:
			return nil, "", fmt.Errorf("unknown fail argument %q", kv)
		}
	}
	return cmd, "", nil
}

// parseEndWait resolves an endwait step in the interval's view.
func parseEndWait(view *state, args []string) (command, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("endwait needs a rank")
	}
	r, err := strconv.Atoi(args[0])
	if err != nil {
		return nil, err
	}
	cmd := endWait{Rank: r, Since: view.Epoch}
	if since, ok := view.AwaitingSince(r); ok {
		cmd.Since = since
	}
	for _, kv := range args[1:] {
		v, ok := strings.CutPrefix(kv, "since=")
		if !ok {
			return nil, fmt.Errorf("unknown endwait argument %q", kv)
		}
		if cmd.Since, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("bad %q: %v", kv, err)
		}
	}
	return cmd, nil
}

func (s *scenario) apply(cmd command) {
	t := s.t
	t.Helper()
	b, err := encodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode %#v: %v", cmd, err)
	}
	back, err := decodeCommand(b)
	if err != nil || !reflect.DeepEqual(normalize(back), normalize(cmd)) {
		t.Fatalf("round trip of %#v gave %#v, %v", cmd, back, err)
	}
	before := s.st.Epoch
	res, err := s.st.apply(cmd)
	if err != nil {
		fmt.Fprintf(s.out, "  %s: error: %v\n", describe(cmd), err)
	} else {
		fmt.Fprintf(s.out, "  %s: %s\n", describe(cmd), describeResult(res))
	}
	if err := s.st.Validate(); err != nil {
		t.Fatalf("after %s: %v", describe(cmd), err)
	}
	if s.st.Epoch < before || (res.Changed && res.Epoch != s.st.Epoch) {
		t.Fatalf("epoch went from %d to %d (result says %d)", before, s.st.Epoch, res.Epoch)
	}
	again := s.st.Clone()
	res2, err2 := again.apply(cmd)
	if res2.Changed || !reflect.DeepEqual(normState(again), normState(*s.st)) || (err == nil && err2 != nil) {
		t.Fatalf("%s is not idempotent: second result %+v, %v", describe(cmd), res2, err2)
	}
	enc, err := encodeState(s.st)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decodeState(enc)
	if err != nil || !reflect.DeepEqual(normState(dec), normState(*s.st)) {
		t.Fatalf("state round trip: %v\n got %+v\nwant %+v", err, dec, *s.st)
	}
}

func normalize(c command) command {
	if v, ok := c.(setVoters); ok && len(v.Voters) == 0 {
		return setVoters{}
	}
	return c
}

func normState(s state) state {
	c := s.Clone()
	if len(c.Spares) == 0 {
		c.Spares = nil
	}
	if len(c.Voters) == 0 {
		c.Voters = nil
	}
	if len(c.Awaiting) == 0 {
		c.Awaiting = nil
	}
	return c
}

func procName(p uint32) string {
	if p == noProc {
		return "none"
	}
	return strconv.FormatUint(uint64(p), 10)
}

func describe(cmd command) string {
	switch c := cmd.(type) {
	case declareFailed:
		return fmt.Sprintf("DeclareFailed proc=%d by=%s at=%d", c.Proc, procName(c.Reporter), c.Epoch)
	case addSpare:
		return fmt.Sprintf("AddSpare proc=%d host=%s", c.Proc, c.Info.Host)
	case finish:
		return "Finish"
	case setVoters:
		return fmt.Sprintf("SetVoters %v", c.Voters)
	case endWait:
		return fmt.Sprintf("EndWait rank=%d since=%d", c.Rank, c.Since)
	}
	return fmt.Sprintf("%T", cmd)
}

func describeResult(r result) string {
	var b strings.Builder
	if r.Changed {
		b.WriteString("changed")
	} else {
		b.WriteString("no-op")
	}
	fmt.Fprintf(&b, " epoch=%d", r.Epoch)
	if r.Rank >= 0 {
		fmt.Fprintf(&b, " rank=%d promoted=%s", r.Rank, procName(r.Promoted))
	}
	fmt.Fprintf(&b, " status=%s (%s)", r.Status, r.Note)
	return b.String()
}

func summarize(s *state) string {
	ranks := make([]string, s.Ranks.len())
	for i, p := range s.Ranks.slice() {
		ranks[i] = procName(p)
		if p == noProc {
			ranks[i] = "-"
		}
	}
	var failed []string
	for _, p := range slices.Sorted(mapsKeys(s.Failed)) {
		failed = append(failed, fmt.Sprintf("%d@%d", p, s.Failed[p]))
	}
	status := s.Status.String()
	if s.StatusReason != "" {
		status += "(" + s.StatusReason + ")"
	}
	out := fmt.Sprintf("epoch=%d status=%s ranks=[%s] spares=%v failed=[%s] voters=%v",
		s.Epoch, status, strings.Join(ranks, " "), s.Spares, strings.Join(failed, " "), s.Voters)
	if len(s.Awaiting) > 0 {
		var aw []string
		for _, a := range s.Awaiting {
			aw = append(aw, fmt.Sprintf("%d@%d", a.Rank, a.Since))
		}
		out += fmt.Sprintf(" awaiting=[%s]", strings.Join(aw, " "))
	}
	return out
}
