package ckpt

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/script"
)

// TestRestorePlanScripts runs testdata/restore/*.txt through planRestore
// and rebuildPositions, and the disk level's agreement through
// diskSearch (no runtime, no I/O), and compares the trace with the
// .golden file beside each (internal/testkit/script; -rewrite regenerates them). Script language, one step per line, #
// starts a comment:
//
//	job ranks=N [mirrors=K] [hosts=a,b,...]   a job of N ranks (one host by default)
//	rank R [gen=G] [local=P,P] [committed=B] [mirror=M] [copies=SRC:P/POS.SLOT,...]
//	                          rank R's inventory entry; P is ID@GEN or - (no
//	                          snapshot in that buffer); a rank without a line
//	                          is a promoted spare (holds nothing)
//	vacant R                  rank R has no process (the job shrank)
//	plan [mirror=M]           what every live rank does; M: the new mirror
//	                          segment (default: the highest of the entries)
//	disk R ids=ID,... [bad=ID,...]
//	                          rank R's checkpoint directories on disk, and
//	                          those it cannot load (a file lost or corrupt)
//	search                    the agreement on the disk checkpoint (diskSearch)
//
// The trace gives the target snapshot and, per live rank, where its copy
// comes from (its own buffer, or holders in the order tried) and which
// holders get it pushed again; for the disk level, each round's votes,
// the candidate and who loaded it.
func TestRestorePlanScripts(t *testing.T) {
	script.Test(t, "testdata/restore/*.txt", func(*testing.T) script.Interpreter { return &planRun{} })
}

// planRun interprets one script.
type planRun struct{ s *planScript }

func (p *planRun) Exec(out io.Writer, c script.Cmd) error {
	f := strings.Fields(c.Text)
	if f[0] != "job" && p.s == nil {
		return fmt.Errorf("%q before job", c.Text)
	}
	s := p.s
	var err error
	switch f[0] {
	case "job":
		p.s, err = newPlanScript(f[1:])
	case "rank":
		err = s.rank(f[1:])
	case "vacant":
		var r int
		if r, err = s.rankArg(f[1]); err == nil {
			s.entries[r] = entry{vacant: true, rank: r, mirrorID: -1}
		}
	case "plan":
		err = s.plan(f[1:], out)
	case "disk":
		err = s.disk(f[1:])
	case "search":
		s.search(out)
	default:
		err = fmt.Errorf("unknown step %q", f[0])
	}
	return err
}

type planScript struct {
	disks     []diskFiles
	entries   []entry
	hosts     []string
	mirrors   int
	committed []int
}

func keyVals(args []string) (map[string]string, error) {
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", a)
		}
		m[k] = v
	}
	return m, nil
}

func newPlanScript(args []string) (*planScript, error) {
	kv, err := keyVals(args)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(kv["ranks"])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("job: ranks=%q: want a number of ranks", kv["ranks"])
	}
	s := &planScript{mirrors: 1, hosts: make([]string, n), committed: make([]int, n), disks: make([]diskFiles, n)}
	if m, ok := kv["mirrors"]; ok {
		if s.mirrors, err = strconv.Atoi(m); err != nil {
			return nil, fmt.Errorf("job: mirrors=%q: %v", m, err)
		}
	}
	if h, ok := kv["hosts"]; ok {
		hs := strings.Split(h, ",")
		if len(hs) != n {
			return nil, fmt.Errorf("job: %d hosts for %d ranks", len(hs), n)
		}
		copy(s.hosts, hs)
	}
	for r := range n {
		s.entries = append(s.entries, entry{rank: r, mirrorID: -1}) // a fresh spare until described
		s.committed[r] = -1
	}
	return s, nil
}

func (s *planScript) rankArg(a string) (int, error) {
	r, err := strconv.Atoi(a)
	if err != nil || r < 0 || r >= len(s.entries) {
		return 0, fmt.Errorf("rank %q: want 0..%d", a, len(s.entries)-1)
	}
	return r, nil
}

// rankKeyVals parses the arguments "R key=value..." of command cmd.
func (s *planScript) rankKeyVals(cmd string, args []string) (int, map[string]string, error) {
	if len(args) == 0 {
		return 0, nil, fmt.Errorf("%s: which rank?", cmd)
	}
	r, err := s.rankArg(args[0])
	if err != nil {
		return 0, nil, err
	}
	kv, err := keyVals(args[1:])
	return r, kv, err
}

func parsePair(a string) (*pair, error) {
	if a == "-" {
		return nil, nil
	}
	id, gen, ok := strings.Cut(a, "@")
	i, err1 := strconv.ParseUint(id, 10, 64)
	g, err2 := strconv.ParseUint(gen, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("snapshot %q: want ID@GEN or -", a)
	}
	return &pair{i, g}, nil
}

func (s *planScript) rank(args []string) error {
	r, kv, err := s.rankKeyVals("rank", args)
	if err != nil {
		return err
	}
	e := entry{rank: r, mirrorID: 10}
	if v, ok := kv["gen"]; ok {
		if e.gen, err = strconv.ParseUint(v, 10, 64); err != nil {
			return fmt.Errorf("gen=%q: %v", v, err)
		}
	}
	if v, ok := kv["mirror"]; ok {
		if e.mirrorID, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("mirror=%q: %v", v, err)
		}
	}
	if v, ok := kv["committed"]; ok {
		if s.committed[r], err = strconv.Atoi(v); err != nil || s.committed[r] < -1 || s.committed[r] > 1 {
			return fmt.Errorf("committed=%q: want 0, 1 or -1", v)
		}
	}
	if v, ok := kv["local"]; ok {
		ps := strings.Split(v, ",")
		if len(ps) != 2 {
			return fmt.Errorf("local=%q: want two buffers, P,P", v)
		}
		for b, a := range ps {
			if e.local[b], err = parsePair(a); err != nil {
				return err
			}
		}
	}
	if v, ok := kv["copies"]; ok {
		for _, c := range strings.Split(v, ",") {
			src, rest, ok1 := strings.Cut(c, ":")
			snap, where, ok2 := strings.Cut(rest, "/")
			pos, slot, ok3 := strings.Cut(where, ".")
			if !ok1 || !ok2 || !ok3 {
				return fmt.Errorf("copy %q: want SRC:ID@GEN/POS.SLOT", c)
			}
			h := heldCopy{}
			var err1, err2, err3 error
			h.src, err1 = strconv.Atoi(src)
			h.pos, err2 = strconv.Atoi(pos)
			h.slot, err3 = strconv.Atoi(slot)
			p, err4 := parsePair(snap)
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil || p == nil {
				return fmt.Errorf("copy %q: want SRC:ID@GEN/POS.SLOT", c)
			}
			h.p = *p
			e.copies = append(e.copies, h)
		}
	}
	s.entries[r] = e
	return nil
}

func (s *planScript) plan(args []string, out io.Writer) error {
	kv, err := keyVals(args)
	if err != nil {
		return err
	}
	mirror := -1
	for _, e := range s.entries {
		mirror = max(mirror, e.mirrorID)
	}
	if v, ok := kv["mirror"]; ok {
		if mirror, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("mirror=%q: %v", v, err)
		}
	}
	var live []int
	for _, e := range s.entries {
		if !e.vacant {
			live = append(live, e.rank)
		}
	}
	lay := newLayout(s.hosts, s.mirrors, live)
	// The exchange, as Restore runs it: every holder reports its copies
	// to their ranks, the ranks agree on the snapshots all of them have
	// and on the highest generation.
	hs := make([][]held, len(s.entries))
	maxGen := uint64(0)
	for _, e := range s.entries {
		if e.vacant {
			continue
		}
		maxGen = max(maxGen, e.gen)
		for _, p := range e.local {
			if p != nil {
				maxGen = max(maxGen, p.gen)
			}
		}
		for _, h := range e.copies {
			maxGen = max(maxGen, h.p.gen)
			if h.src >= 0 && h.src < len(hs) && h.src != e.rank {
				hs[h.src] = append(hs[h.src], held{source: source{holder: e.rank, mirror: e.mirrorID, pos: h.pos, slot: h.slot}, p: h.p})
			}
		}
	}
	common := haveSet(s.entries[live[0]].local, hs[live[0]])
	for _, r := range live[1:] {
		common = intersectPairs(common, haveSet(s.entries[r].local, hs[r]))
	}
	for i, r := range live {
		pl := planRestore(r, len(s.entries), s.entries[r].local, hs[r], common, s.committed[r])
		if i == 0 {
			if !pl.found {
				fmt.Fprintf(out, "  nothing held for every live rank: ErrNoCheckpoint, every rank starts over (generation %d)\n", maxGen+1)
				return nil
			}
			fmt.Fprintf(out, "  restore %d@%d, then generation %d\n", pl.target.id, pl.target.gen, maxGen+1)
		}
		buf := pl.local
		if pl.local >= 0 {
			fmt.Fprintf(out, "  rank %d: its own buffer %d", r, pl.local)
		} else {
			buf = pl.into
			var from []string
			for _, src := range pl.sources {
				from = append(from, fmt.Sprintf("holder %d (mirror %d pos %d slot %d)", src.holder, src.mirror, src.pos, src.slot))
			}
			if len(from) == 0 {
				from = []string{"nobody"}
			}
			fmt.Fprintf(out, "  rank %d: fetch into buffer %d from %s", r, pl.into, strings.Join(from, ", then "))
		}
		var again []string
		for _, h := range rebuildPositions(hs[r], lay, mirror, r, pl.target, buf) {
			again = append(again, fmt.Sprintf("%d (pos %d slot %d)", h.holder, h.pos, h.slot))
		}
		if len(again) == 0 {
			io.WriteString(out, "; mirrors intact\n")
		} else {
			fmt.Fprintf(out, "; push again to %s\n", strings.Join(again, ", "))
		}
	}
	return nil
}

// diskFiles is a rank's disk level in a script.
type diskFiles struct {
	ids []uint64 // newest first
	bad map[uint64]bool
}

func parseIDs(v string) ([]uint64, error) {
	var ids []uint64
	for _, a := range strings.Split(v, ",") {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("checkpoint id %q: want a number", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (s *planScript) disk(args []string) error {
	r, kv, err := s.rankKeyVals("disk", args)
	if err != nil {
		return err
	}
	d := diskFiles{bad: map[uint64]bool{}}
	if v := kv["ids"]; v != "" {
		if d.ids, err = parseIDs(v); err != nil {
			return err
		}
		slices.Sort(d.ids)
		slices.Reverse(d.ids)
	}
	if v := kv["bad"]; v != "" {
		bad, err := parseIDs(v)
		if err != nil {
			return err
		}
		for _, id := range bad {
			d.bad[id] = true
		}
	}
	s.disks[r] = d
	return nil
}

// search runs diskSearch on every rank, the allreduces in between done
// here, and traces each round.
func (s *planScript) search(out io.Writer) {
	n := len(s.disks)
	ds := make([]*diskSearch, n)
	for r := range ds {
		ds[r] = newDiskSearch(s.disks[r].ids)
	}
	for round := 1; ; round++ {
		votes := make([]uint64, n)
		minVote := uint64(math.MaxUint64)
		for r, d := range ds {
			v, ok := d.vote(func(id uint64) bool { return !s.disks[r].bad[id] })
			if !ok {
				io.WriteString(out, "  rounds used up: nothing loaded\n")
				return
			}
			votes[r], minVote = v, min(minVote, v)
		}
		var vs []string
		for _, v := range votes {
			if v == 0 {
				vs = append(vs, "-")
			} else {
				vs = append(vs, strconv.FormatUint(v-1, 10))
			}
		}
		fmt.Fprintf(out, "  round %d: newest loadable per rank [%s]", round, strings.Join(vs, " "))
		var x uint64
		all := true
		var missing []string
		for r, d := range ds {
			cx, has, ok := d.candidate(minVote)
			if !ok {
				io.WriteString(out, "; some rank has none: ErrNoCheckpoint\n")
				return
			}
			x = cx
			if !has || s.disks[r].bad[cx] {
				all = false
				missing = append(missing, strconv.Itoa(r))
			}
		}
		if all {
			fmt.Fprintf(out, "; every rank loads %d\n", x)
		} else {
			fmt.Fprintf(out, "; candidate %d, which ranks %s cannot load\n", x, strings.Join(missing, " "))
		}
		more := false
		for _, d := range ds {
			var done bool
			done, more = d.settle(x, all)
			if done {
				more = false
			}
		}
		if all {
			return
		}
		if !more {
			io.WriteString(out, "  nothing below: ErrNoCheckpoint\n")
			return
		}
	}
}
