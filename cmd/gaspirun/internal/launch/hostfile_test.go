package launch

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostfile(t *testing.T) {
	in := `# cluster
node1 slots=4
  node2   slots=2 max_slots=8   # trailing comment

10.0.0.5
node1 slots=2
user@node3 max-slots=1
`
	got, err := ParseHostfile(strings.NewReader(in), "hf")
	if err != nil {
		t.Fatal(err)
	}
	want := []HostSlots{{"node1", 6}, {"node2", 2}, {"10.0.0.5", 1}, {"user@node3", 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestParseHostfileErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"node1\nnode2 slots=x\n", `--hostfile hf: line 2 ("node2 slots=x"): slots=x: not a whole number from 1 to 4096; write e.g. slots=4`},
		{"node1 slots=0", "line 1 (\"node1 slots=0\"): slots=0: not a whole number"},
		{"\n\n# c\nnode1 cpus=4", `line 4 ("node1 cpus=4"): unknown setting "cpus"; only slots=N and max_slots=N are understood`},
		{"node1 4", `line 1 ("node1 4"): "4" is not KEY=VALUE`},
		{"slots=4 node1", "line 1 (\"slots=4 node1\"): the line starts with a setting, not a host name"},
		{"-oProxyJump", `host "-oProxyJump" starts with '-'`},
		{"node$(id)", `host "node$(id)" has the character '$'`},
		{"node1 slots=4 max_slots=2", "max_slots=2 is below slots=4"},
		{"node1 slots=1 slots=2", "slots is given twice"},
		{"# nothing\n\n", "--hostfile hf: lists no host"},
		{"node1 slots=99999", "not a whole number from 1 to 4096"},
	}
	for _, c := range cases {
		_, err := ParseHostfile(strings.NewReader(c.in), "hf")
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.want)
		}
	}
	var he *HostfileError
	_, err := ParseHostfile(strings.NewReader("a\nb c\n"), "hf")
	if !errors.As(err, &he) || he.Line != 2 || he.Text != "b c" {
		t.Errorf("HostfileError %+v", he)
	}
	if _, err := ReadHostfile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "cannot be read: no such file or directory") {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "hf")
	os.WriteFile(p, []byte("n1 slots=2\n"), 0o644)
	if h, err := ReadHostfile(p); err != nil || len(h) != 1 || h[0].Slots != 2 {
		t.Errorf("ReadHostfile: %v %v", h, err)
	}
}

func TestPlace(t *testing.T) {
	hs := func(slots ...int) []HostSlots {
		var out []HostSlots
		for i, s := range slots {
			out = append(out, HostSlots{Name: string(rune('a' + i)), Slots: s})
		}
		return out
	}
	cases := []struct {
		hosts         []HostSlots
		ranks, spares int
		want          string
		uncovered     []string
	}{
		// Ranks fill by slot; spares go to the host with no ranks.
		{hs(2, 2, 2), 4, 2, "a: r0-1; b: r2-3; c: s4-5", nil},
		// Spares spread over the emptiest hosts, later hosts first on ties.
		{hs(2, 2, 2, 2), 2, 2, "a: r0-1; c: s3; d: s2", nil},
		// One spare per host of ranks would die with them; they go elsewhere.
		{hs(4, 4), 2, 2, "a: r0-1; b: s2-3", nil},
		// Too few slots elsewhere: the fullest host stays uncovered.
		{hs(3, 3), 4, 2, "a: r0-2; b: r3,s4-5", []string{"a (3 ranks, 2 spares elsewhere)", "b (1 rank, 0 spares elsewhere)"}},
		{hs(2, 2, 1), 3, 1, "a: r0-1; b: r2; c: s3", []string{"a (2 ranks, 1 spare elsewhere)"}},
		// Equal counts: the spare goes to the host with fewer ranks.
		{hs(2, 3, 2), 3, 3, "a: r0-1; b: r2,s5; c: s3-4", nil},
		{hs(1, 1, 1), 2, 1, "a: r0; b: r1; c: s2", nil},
		{hs(5), 2, 0, "a: r0-1", []string{"a (2 ranks, 0 spares elsewhere)"}},
	}
	for _, c := range cases {
		p, err := Place(c.hosts, c.ranks, c.spares)
		if err != nil {
			t.Fatalf("%v: %v", c.hosts, err)
		}
		if p.String() != c.want || !reflect.DeepEqual(p.Uncovered(), c.uncovered) {
			t.Errorf("%v -n %d --spares %d: got %q, uncovered %q; want %q, %q", c.hosts, c.ranks, c.spares, p, p.Uncovered(), c.want, c.uncovered)
		}
		checkPlacement(t, p, c.hosts, c.ranks+c.spares)
	}
	_, err := Place(hs(2, 1), 2, 2)
	if err == nil || !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "its 2 hosts offer 3 slots, too few for 4 processes (-n 2 + --spares 2); add hosts or slots") {
		t.Errorf("too few slots: %v", err)
	}
}

// checkPlacement checks what holds for every placement: no host over its
// slots, every process placed, and ranks in host order.
func checkPlacement(t *testing.T, p Placement, hosts []HostSlots, n int) {
	t.Helper()
	used := make([]int, len(hosts))
	for proc, h := range p.HostOf {
		used[h]++
		if proc > 0 && proc < p.Ranks && p.HostOf[proc] < p.HostOf[proc-1] {
			t.Errorf("rank %d on host %d before rank %d's host %d", proc, h, proc-1, p.HostOf[proc-1])
		}
	}
	for i := range hosts {
		if used[i] > hosts[i].Slots {
			t.Errorf("host %s: %d processes in %d slots", hosts[i].Name, used[i], hosts[i].Slots)
		}
	}
	if len(p.HostOf) != n {
		t.Errorf("%d processes placed, want %d", len(p.HostOf), n)
	}
}

// TestPlaceCoversWhenPossible compares Place's coverage with a brute-force
// search over every spare placement for small cases: when some placement
// of the spares (ranks filled by slot) covers the loss of every host,
// Place finds one.
func TestPlaceCoversWhenPossible(t *testing.T) {
	for a := 1; a <= 3; a++ {
		for b := 1; b <= 3; b++ {
			for c := 1; c <= 3; c++ {
				hosts := []HostSlots{{"a", a}, {"b", b}, {"c", c}}
				for ranks := 1; ranks <= a+b+c; ranks++ {
					for spares := 1; ranks+spares <= a+b+c; spares++ {
						p, err := Place(hosts, ranks, spares)
						if err != nil {
							t.Fatal(err)
						}
						checkPlacement(t, p, hosts, ranks+spares)
						if len(p.Uncovered()) > 0 && coverable(hosts, p, spares) {
							t.Errorf("%v -n %d --spares %d: %q leaves %q uncovered, but a covering placement exists", hosts, ranks, spares, p, p.Uncovered())
						}
					}
				}
			}
		}
	}
}

// coverable tries every way to put the spares into the slots the ranks of
// p leave free.
func coverable(hosts []HostSlots, p Placement, spares int) bool {
	ranks := make([]int, len(hosts))
	for proc := 0; proc < p.Ranks; proc++ {
		ranks[p.HostOf[proc]]++
	}
	s := make([]int, len(hosts))
	var try func(i, left int) bool
	try = func(i, left int) bool {
		if i == len(hosts) {
			if left > 0 {
				return false
			}
			for h := range hosts {
				if ranks[h] > spares-s[h] {
					return false
				}
			}
			return true
		}
		for k := 0; k <= min(left, hosts[i].Slots-ranks[i]); k++ {
			s[i] = k
			if try(i+1, left-k) {
				return true
			}
		}
		return false
	}
	return try(0, spares)
}

func TestParseHostList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []HostSlots
	}{
		{"a", []HostSlots{{"a", 1}}},
		{"a,b:4, a:2", []HostSlots{{"a", 3}, {"b", 4}}},
		{"10.0.0.7:2,fe80::1,[fe80::2]:3,[fe80::3]", []HostSlots{{"10.0.0.7", 2}, {"fe80::1", 1}, {"fe80::2", 3}, {"fe80::3", 1}}},
	} {
		got, err := ParseHostList(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseHostList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if back, _ := ParseHostList(FormatHostList(got)); !reflect.DeepEqual(back, c.want) {
			t.Errorf("FormatHostList(%v) = %q does not parse back", got, FormatHostList(got))
		}
	}
	for _, c := range []struct{ in, want string }{
		{"a,,b", "--host a,,b: has an empty host name"},
		{"a:0", `"a:0": slots "0" is not a whole number`},
		{"a:x", `"a:x": slots "x" is not a whole number`},
		{"-oProxy", `host "-oProxy" starts with '-'`},
		{"a b", `host "a b" has the character ' '`},
	} {
		if _, err := ParseHostList(c.in); err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("ParseHostList(%q): %v, want %q", c.in, err, c.want)
		}
	}
}
