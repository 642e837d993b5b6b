package mhtier

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// TestNoFailure (a): the failure-free job over three hosts; its answer is
// the reference of the other scenarios. Every process, the idle spares
// too, exits 0 by itself.
func TestNoFailure(t *testing.T) {
	reference(t)
}

// scenario runs the job on three new hosts (tune adjusts its
// configuration), applies fault once it has done triggerIter iterations,
// and checks the end (see finish) with want.
func scenario(t *testing.T, tune func(*mhjob.Config), fault func(*simhost.Cluster, *mhjob.Job), want map[int]end) {
	t.Helper()
	ref := reference(t)
	c := newCluster(t)
	j := start(t, c, tune)
	waitIter(t, j, triggerIter)
	fault(c, j)
	finish(t, j, want, ref)
}

// crashHost SIGKILLs everything on host i, which runs two processes.
func crashHost(t *testing.T, i int) func(*simhost.Cluster, *mhjob.Job) {
	return func(c *simhost.Cluster, _ *mhjob.Job) {
		h := c.Host(i)
		if killed, err := c.Crash(h); err != nil || len(killed) != 2 {
			t.Fatalf("crash of %s killed %v (%v), want its two processes", h.Name(), killed, err)
		}
	}
}

// cutHost cuts host i off silently; after heal (if not zero) it heals it.
func cutHost(t *testing.T, i int, heal time.Duration) func(*simhost.Cluster, *mhjob.Job) {
	return func(c *simhost.Cluster, _ *mhjob.Job) {
		h := c.Host(i)
		if err := c.Cut(h, simhost.Silent); err != nil {
			t.Fatal(err)
		}
		if heal == 0 {
			return
		}
		time.Sleep(heal) // the scenario: a partition this long
		if err := c.Heal(h); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostCrash (b): every process of node2 (rank 2 and the spare process
// 4) is SIGKILLed at once; node3's spare takes rank 2.
func TestHostCrash(t *testing.T) {
	scenario(t, nil, crashHost(t, 1), map[int]end{2: killedBy9, 4: killedBy9})
}

// TestRendezvousHostCrash (c): node1, which runs process 0 (rank 0 and
// the rendezvous) and rank 1, is lost; the spares take ranks 0 and 1 and
// the new rank 0 prints the answer.
func TestRendezvousHostCrash(t *testing.T) {
	scenario(t, nil, crashHost(t, 0), map[int]end{0: killedBy9, 1: killedBy9})
}

// TestHostCutOff (d): node2 is cut off for good (a silent partition). The
// others replace rank 2 and finish; node2's processes (the replaced rank
// and an idle spare), which can reach nobody, must give up by themselves
// as cut off.
func TestHostCutOff(t *testing.T) {
	scenario(t, nil, cutHost(t, 1, 0), map[int]end{2: cutOff, 4: cutOff})
}

// TestHostCutAndHealed (e): node2 is cut off for 4 s, then healed. Its
// processes were replaced meanwhile: on healing they must learn it and
// exit 77 (or, if nobody is left to tell them, give up as cut off); so
// must the idle spare there.
func TestHostCutAndHealed(t *testing.T) {
	scenario(t, nil, cutHost(t, 1, 4*time.Second), map[int]end{2: cutOff, 4: cutOff})
}

// TestHostnameRendezvous (f): PGAS_RENDEZVOUS=node1:29400, and node1
// resolves its own name to 127.0.1.1 (Debian's /etc/hosts). node1's
// processes must still advertise an address the other hosts reach:
// process 0, which serves the rendezvous, logs (at debug level) the
// address every process registers with, and none may be loopback. Then
// node2 is crashed, and the recovery needs node1's membership listeners.
func TestHostnameRendezvous(t *testing.T) {
	tune := func(cfg *mhjob.Config) {
		cfg.Rendezvous = fmt.Sprintf("node1:%d", mhjob.RendezvousPort)
		cfg.EnvOf = func(p int) []string {
			if p == 0 {
				return []string{"PGAS_LOG=debug"}
			}
			return nil
		}
	}
	crash := crashHost(t, 1)
	scenario(t, tune, func(c *simhost.Cluster, j *mhjob.Job) {
		checkAdvertised(t, j)
		crash(c, j)
	}, map[int]end{2: killedBy9, 4: killedBy9})
}

// checkAdvertised fails the test for every registration (logged by
// process 0) with a loopback address, and when none of a node1 process
// was logged.
func checkAdvertised(t *testing.T, j *mhjob.Job) {
	t.Helper()
	seen := 0
	for _, l := range j.Lines() {
		if l.Proc != 0 || !strings.Contains(l.Text, `msg="rendezvous: registered"`) {
			continue
		}
		kv := map[string]string{}
		proctest.ParseKV(l.Text, kv)
		ap, err := netip.ParseAddrPort(kv["addr"])
		if err != nil || ap.Addr().IsLoopback() {
			t.Errorf("a process on %s registered address %q: the other hosts cannot reach it", kv["host"], kv["addr"])
		}
		if kv["host"] == "node1" {
			seen++
		}
	}
	if seen == 0 {
		t.Errorf("process 0 logged no registration of a node1 process: the advertised addresses were not checked\n%s", output(j))
	}
}
