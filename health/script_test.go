package health

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/script"
	"github.com/gaspigo/gaspigo/transport"
)

// TestScripts runs every testdata/*.script through the scenario runner and
// compares its trace with testdata/*.golden (rewrite with -rewrite).
// Expectations inside a script fail the test whatever the golden says.
//
// Script language, one command per line, # starts a comment:
//
//	config n=8 r=2 p=3 c=2 interval=5 suspect=15 probe=10 round=20 health=3 delay=1 maxdelay=1 drop=0 seed=1
//	tick N                       advance N ticks
//	kill P                       SIGKILL: peers get PeerDown, sends to P fail
//	crash P                      silent death: messages to P vanish
//	pause P... / resume P... [backlog K]
//	                             SIGSTOP / SIGCONT (or a starved process): no ticks, messages
//	                             to P wait; on resume the driver reports the stall (Late), and
//	                             the waiting messages reach P only after K ticks (default 0)
//	partition 0 | 1 2 3          messages between groups are lost; unlisted processes form one more group
//	cut A B                      the link A–B loses messages both ways
//	heal                         end partitions and cuts
//	hint O P / peerdown O P      input to observer O about P
//	members P P ...              a new committed view for every live process
//	expect confirmed P [by O] (within silent|within peerdown|at <= tick N)
//	expect not confirmed P [by O]   nobody (or O) ever confirmed P
//	expect no confirmations [by O]
//	expect suspected P [by O] / expect not suspected P [by O]   ever
//	expect refuted P
//	expect status O P alive|suspected|confirmed|nonmember
//	expect health O (>=|==|<=) N
func TestScripts(t *testing.T) {
	script.Test(t, "testdata/*.script", func(t *testing.T) script.Interpreter { return &scriptRun{t: t} })
}

// scriptConfig is the default configuration of scripts.
func scriptConfig() CoreConfig {
	return CoreConfig{
		IntervalTicks: 5, SuspectTicks: 15, ProbeTicks: 10, RoundTicks: 20,
		Successors: 2, Helpers: 3, Confirmations: 2, MaxLocalHealth: 3, MaxPendingProbes: 64,
	}
}

type scriptRun struct {
	t     *testing.T
	cmd   script.Cmd // the command being run
	net   *simNet
	out   io.Writer // the trace
	shown int       // events already printed
}

// Exec runs one command, then prints the events it caused.
func (r *scriptRun) Exec(out io.Writer, c script.Cmd) error {
	r.cmd, r.out = c, out
	if err := r.exec(strings.Fields(c.Text)); err != nil {
		return err
	}
	r.flushEvents()
	return nil
}

func (r *scriptRun) flushEvents() {
	if r.net == nil {
		return
	}
	for _, e := range r.net.events[r.shown:] {
		fmt.Fprintf(r.out, "  %v\n", e)
	}
	r.shown = len(r.net.events)
}

func (r *scriptRun) ensureNet() error {
	if r.net != nil {
		return nil
	}
	return r.exec([]string{"config"})
}

func proc(s string) (transport.Proc, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("want a process number, got %q", s)
	}
	return transport.Proc(v), nil
}

func procs(args []string) ([]transport.Proc, error) {
	var out []transport.Proc
	for _, a := range args {
		p, err := proc(a)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (r *scriptRun) exec(f []string) error {
	cmd, args := f[0], f[1:]
	if cmd != "config" {
		if err := r.ensureNet(); err != nil {
			return err
		}
	}
	argProc := func(i int) (transport.Proc, error) {
		if i >= len(args) {
			return 0, fmt.Errorf("%s: missing argument %d", cmd, i+1)
		}
		p, err := proc(args[i])
		if err == nil && r.net != nil && int(p) >= len(r.net.cores) {
			err = fmt.Errorf("process %d out of range (n=%d)", p, len(r.net.cores))
		}
		return p, err
	}
	switch cmd {
	case "config":
		return r.config(args)
	case "tick":
		if len(args) != 1 {
			return fmt.Errorf("usage: tick N")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			return fmt.Errorf("tick: want a count, got %q", args[0])
		}
		r.net.run(n)
	case "kill", "crash":
		p, err := argProc(0)
		if err != nil {
			return err
		}
		map[string]func(transport.Proc){"kill": r.net.kill, "crash": r.net.crash}[cmd](p)
	case "pause", "resume":
		backlog := 0
		if n := len(args); n >= 2 && args[n-2] == "backlog" {
			b, err := strconv.Atoi(args[n-1])
			if err != nil || b < 0 || cmd != "resume" {
				return fmt.Errorf("usage: resume P... [backlog K]")
			}
			backlog, args = b, args[:n-2]
		}
		if len(args) == 0 {
			return fmt.Errorf("usage: %s P...", cmd)
		}
		for i := range args {
			p, err := argProc(i)
			if err != nil {
				return err
			}
			if cmd == "pause" {
				r.net.pause(p)
			} else {
				r.net.resume(p, backlog)
			}
		}
	case "partition":
		var groups [][]transport.Proc
		cur := []transport.Proc{}
		for _, a := range args {
			if a == "|" {
				groups, cur = append(groups, cur), []transport.Proc{}
				continue
			}
			p, err := proc(a)
			if err != nil {
				return err
			}
			cur = append(cur, p)
		}
		r.net.partition(append(groups, cur))
	case "cut":
		a, err := argProc(0)
		if err != nil {
			return err
		}
		b, err := argProc(1)
		if err != nil {
			return err
		}
		r.net.cutLink(a, b)
	case "heal":
		r.net.heal()
	case "hint", "peerdown":
		o, err := argProc(0)
		if err != nil {
			return err
		}
		if len(args) != 2 {
			return fmt.Errorf("usage: %s O P", cmd)
		}
		p, err := proc(args[1]) // may be outside the job: the Core must cope
		if err != nil {
			return err
		}
		if cmd == "hint" {
			r.net.cores[o].Hint(p)
		} else {
			r.net.cores[o].PeerDown(p)
		}
		r.net.collect()
	case "members":
		ms, err := procs(args)
		if err != nil {
			return err
		}
		return r.net.setMembers(ms)
	case "expect":
		msg, ok, err := r.expect(args)
		if err != nil {
			return err
		}
		if ok {
			fmt.Fprintf(r.out, "ok: %s\n", msg)
		} else {
			fmt.Fprintf(r.out, "FAIL: %s\n", msg)
			r.t.Errorf("%s:%d: expectation failed: %s", r.cmd.File, r.cmd.Line, msg)
		}
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func (r *scriptRun) config(args []string) error {
	if r.net != nil {
		return fmt.Errorf("config must come first, before any other command")
	}
	cfg := scriptConfig()
	n, seed, delay, maxDelay, drop := 8, uint64(1), 1, 1, 0.0
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("config: want key=value, got %q", a)
		}
		if k == "drop" {
			var err error
			if drop, err = strconv.ParseFloat(v, 64); err != nil {
				return fmt.Errorf("config: drop: %v", err)
			}
			continue
		}
		x, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("config: %s: want an integer, got %q", k, v)
		}
		switch k {
		case "n":
			n = x
		case "r":
			cfg.Successors = x
		case "p":
			cfg.Helpers = x
		case "c":
			cfg.Confirmations = x
		case "interval":
			cfg.IntervalTicks = x
		case "suspect":
			cfg.SuspectTicks = x
		case "probe":
			cfg.ProbeTicks = x
		case "round":
			cfg.RoundTicks = x
		case "health":
			cfg.MaxLocalHealth = x
		case "delay":
			delay = x
		case "maxdelay":
			maxDelay = x
		case "seed":
			seed = uint64(x)
		default:
			return fmt.Errorf("config: unknown key %q", k)
		}
	}
	if delay < 1 || maxDelay < delay {
		return fmt.Errorf("config: want 1 <= delay <= maxdelay, got %d and %d", delay, maxDelay)
	}
	net, err := newSimNet(cfg, n, seed)
	if err != nil {
		return err
	}
	net.minDelay, net.maxDelay, net.dropRate = delay, maxDelay, drop
	r.net = net
	fmt.Fprintf(r.out, "  n=%d %+v delay=%d..%d drop=%g seed=%d\n", n, cfg, delay, maxDelay, drop, seed)
	return nil
}

// by parses an optional "by O" at args[i:].
func byClause(args []string, i int) (transport.Proc, []string, error) {
	if i+1 < len(args) && args[i] == "by" {
		o, err := proc(args[i+1])
		return o, args[i+2:], err
	}
	return transport.NoProc, args[i:], nil
}

func byText(o transport.Proc) string {
	if o == transport.NoProc {
		return "anyone"
	}
	return fmt.Sprint(o)
}

func (r *scriptRun) everHad(kind EventKind, p, by transport.Proc) (simEvent, bool) {
	for _, e := range r.net.events {
		if e.ev.Kind == kind && (p == transport.NoProc || e.ev.Proc == p) && (by == transport.NoProc || e.observer == by) {
			return e, true
		}
	}
	return simEvent{}, false
}

func (r *scriptRun) expect(args []string) (msg string, ok bool, err error) {
	usage := fmt.Errorf("unknown expectation %q (see TestScripts for the language)", strings.Join(args, " "))
	if len(args) < 2 {
		return "", false, usage
	}
	neg := args[0] == "not"
	if neg {
		args = args[1:]
	}
	switch {
	case args[0] == "no" && len(args) >= 2 && args[1] == "confirmations":
		by, _, err := byClause(args, 2)
		if err != nil {
			return "", false, err
		}
		e, found := r.everHad(Confirmed, transport.NoProc, by)
		if found {
			return fmt.Sprintf("no confirmations by %s, but %v", byText(by), e), false, nil
		}
		return fmt.Sprintf("no confirmations by %s", byText(by)), true, nil
	case args[0] == "confirmed" || args[0] == "suspected" || args[0] == "refuted":
		kind := map[string]EventKind{"confirmed": Confirmed, "suspected": Suspected, "refuted": Refuted}[args[0]]
		if len(args) < 2 {
			return "", false, usage
		}
		p, err := proc(args[1])
		if err != nil {
			return "", false, err
		}
		by, rest, err := byClause(args, 2)
		if err != nil {
			return "", false, err
		}
		e, found := r.everHad(kind, p, by)
		what := fmt.Sprintf("%v %d by %s", kind, p, byText(by))
		if neg {
			if found {
				return "not " + what + ", but " + e.String(), false, nil
			}
			return "not " + what, true, nil
		}
		if !found {
			return what + ": never happened", false, nil
		}
		if len(rest) == 0 {
			return fmt.Sprintf("%s: first at t=%d by %d", what, e.step, e.observer), true, nil
		}
		var bound uint64
		switch strings.Join(rest, " ") {
		case "within silent":
			bound = r.net.faultAt[p] + uint64(r.net.cfg.DetectionBound(r.net.maxDelay, false))
		case "within peerdown":
			bound = r.net.faultAt[p] + uint64(r.net.cfg.DetectionBound(r.net.maxDelay, true))
		default:
			if len(rest) == 4 && rest[0] == "at" && rest[1] == "<=" && rest[2] == "tick" {
				b, err := strconv.ParseUint(rest[3], 10, 64)
				if err != nil {
					return "", false, fmt.Errorf("want a tick, got %q", rest[3])
				}
				bound = b
			} else {
				return "", false, usage
			}
		}
		return fmt.Sprintf("%s: first at t=%d by %d, %d ticks after the fault (bound t=%d)",
			what, e.step, e.observer, e.step-r.net.faultAt[p], bound), e.step <= bound, nil
	case args[0] == "status" && len(args) == 4 && !neg:
		o, err := proc(args[1])
		if err != nil {
			return "", false, err
		}
		p, err := proc(args[2])
		if err != nil {
			return "", false, err
		}
		if int(o) >= len(r.net.cores) {
			return "", false, fmt.Errorf("observer %d out of range", o)
		}
		s, known := r.net.cores[o].Status(p)
		got := s.String()
		if !known {
			got = "nonmember"
		}
		return fmt.Sprintf("status of %d at %d is %s (want %s)", p, o, got, args[3]), got == args[3], nil
	case args[0] == "health" && len(args) == 4 && !neg:
		o, err := proc(args[1])
		if err != nil {
			return "", false, err
		}
		want, err := strconv.Atoi(args[3])
		if err != nil || int(o) >= len(r.net.cores) {
			return "", false, fmt.Errorf("usage: expect health O (>=|==|<=) N")
		}
		h := r.net.cores[o].LocalHealth()
		var ok bool
		switch args[2] {
		case ">=":
			ok = h >= want
		case "==":
			ok = h == want
		case "<=":
			ok = h <= want
		default:
			return "", false, fmt.Errorf("health: unknown comparison %q", args[2])
		}
		return fmt.Sprintf("local health of %d is %d (want %s %d)", o, h, args[2], want), ok, nil
	}
	return "", false, usage
}
