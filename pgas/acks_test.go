package pgas

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// ackInStep is one event on the receiving side and what it must give:
// "apply N", "refuse N C", "request", "piggyback", "take", "sent N".
type ackInStep struct {
	do   string
	want string // schedule=true|false, ack=N, flush=[nacks] ack=N; "" for none
}

func runAckIn(t *testing.T, steps []ackInStep) {
	t.Helper()
	var a ackIn
	for i, s := range steps {
		f := strings.Fields(s.do)
		num := func(k int) uint64 {
			var n uint64
			fmt.Sscan(f[k], &n)
			return n
		}
		var got string
		switch f[0] {
		case "apply":
			a.apply(num(1))
		case "refuse":
			got = fmt.Sprintf("schedule=%v", a.refuse(num(1), num(2)))
		case "request":
			got = fmt.Sprintf("schedule=%v", a.request())
		case "piggyback":
			got = fmt.Sprintf("ack=%d", a.piggyback())
		case "take":
			fl := a.take()
			var ns []string
			for _, n := range fl.nacks {
				ns = append(ns, fmt.Sprintf("%d:%d", n.seq, n.code))
			}
			got = fmt.Sprintf("flush=[%s] ack=%d", strings.Join(ns, " "), fl.ack)
		case "sent":
			a.sent(int(num(1)))
		default:
			t.Fatalf("step %d: unknown event %q", i, s.do)
		}
		if got != s.want {
			t.Fatalf("step %d (%s): got %q, want %q", i, s.do, got, s.want)
		}
	}
}

// Rules (see acks.go): an ack is piggybacked only when nothing refused is
// unsent; a flush sends refusals before the ack; a requested ack is sent
// even when one was piggybacked; one flush is scheduled at a time.
func TestAckIn(t *testing.T) {
	cases := []struct {
		name  string
		steps []ackInStep
	}{
		{"nothing applied: no ack anywhere", []ackInStep{
			{"piggyback", "ack=0"},
			{"request", "schedule=true"},
			{"take", "flush=[] ack=0"},
		}},
		{"applied frames ride on the next frame back", []ackInStep{
			{"apply 1", ""}, {"apply 2", ""},
			{"piggyback", "ack=2"},
			{"take", "flush=[] ack=0"}, // already acknowledged
		}},
		{"a request is answered even after a piggybacked ack", []ackInStep{
			{"apply 3", ""},
			{"piggyback", "ack=3"},
			{"request", "schedule=true"},
			{"request", "schedule=false"}, // one flush at a time
			{"take", "flush=[] ack=3"},
			{"request", "schedule=true"}, // scheduled again once taken
		}},
		{"a refusal holds back piggybacked acks until it is sent", []ackInStep{
			{"apply 1", ""},
			{"refuse 2 5", "schedule=true"},
			{"apply 3", ""},
			{"piggyback", "ack=0"},
			{"take", "flush=[2:5] ack=3"},
			{"piggyback", "ack=0"}, // the refusal is taken, not sent yet
			{"sent 1", ""},
			{"apply 4", ""},
			{"piggyback", "ack=4"},
		}},
		{"refusals queue in order and schedule one flush", []ackInStep{
			{"refuse 1 3", "schedule=true"},
			{"refuse 2 4", "schedule=false"},
			{"take", "flush=[1:3 2:4] ack=0"},
			{"sent 2", ""},
			{"refuse 3 3", "schedule=true"},
		}},
		{"a new refusal during a flush waits for the next one", []ackInStep{
			{"apply 1", ""},
			{"refuse 2 1", "schedule=true"},
			{"take", "flush=[2:1] ack=1"},
			{"refuse 3 1", "schedule=true"},
			{"sent 1", ""},
			{"piggyback", "ack=0"},
			{"take", "flush=[3:1] ack=0"},
			{"sent 1", ""},
			{"apply 4", ""},
			{"piggyback", "ack=4"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runAckIn(t, c.steps) })
	}
}

// Rules: acks are cumulative and never go back; a refusal of seq says
// everything before it was applied; a refusal is collected once.
func TestAckOut(t *testing.T) {
	type outcome struct {
		refused bool
		code    uint64
		applied bool
	}
	cases := []struct {
		name    string
		acks    []uint64    // cumulative acks, in order
		nacks   [][2]uint64 // then refusals: seq, code
		changed []bool      // what each ack reported
		query   []uint64    // outcomes asked, in order
		want    []outcome
	}{
		{"cumulative", []uint64{3, 2, 5}, nil, []bool{true, false, true},
			[]uint64{1, 5, 6}, []outcome{{applied: true}, {applied: true}, {}}},
		{"refusal covers the prefix and is collected once", []uint64{1}, [][2]uint64{{4, 9}}, []bool{true},
			[]uint64{3, 4, 4}, []outcome{{applied: true}, {refused: true, code: 9}, {}}},
		{"a refusal says the prefix was applied", []uint64{}, [][2]uint64{{2, 7}}, nil,
			[]uint64{2, 1}, []outcome{{refused: true, code: 7}, {applied: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a ackOut
			var changed []bool
			for _, s := range c.acks {
				changed = append(changed, a.ack(s))
			}
			if !slices.Equal(changed, c.changed) {
				t.Fatalf("ack changed = %v, want %v", changed, c.changed)
			}
			for _, n := range c.nacks {
				a.nack(n[0], n[1])
			}
			for i, q := range c.query {
				var got outcome
				got.refused, got.code, got.applied = a.outcome(q)
				if got != c.want[i] {
					t.Fatalf("outcome(%d) = %+v, want %+v", q, got, c.want[i])
				}
			}
		})
	}
}
