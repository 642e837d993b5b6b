package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// These tests check how the rendezvous admits joiners, processes started
// after the job formed (docs/design.md §11), over real loopback sockets.

type joinResult struct {
	sess  *Session
	table Table
	id    uint32
	err   error
}

// joinerEnv is a joiner's environment for j's job: the id the launcher
// reserved (or JoinerID), and no counts, as a joiner started by hand has.
func (j *testJob) joinerEnv(proc uint32) Env {
	return Env{Join: true, Proc: proc, Rendezvous: j.env.Rendezvous, Token: j.env.Token, Host: "hj",
		JobID: j.env.JobID, Launcher: LauncherPGAS, TLS: j.env.TLS}
}

// joinerMember is the n-th joiner's member record; its Proc is ignored.
func joinerMember(n int) Member {
	return Member{Addr: fmt.Sprintf("127.0.0.1:%d", 25000+n), Pid: 90000 + n, Extra: map[string]string{"raft": fmt.Sprintf("127.0.0.1:%d", 26000+n)}}
}

// joinAsync runs JoinRunning for the n-th joiner, presenting proc, in a
// goroutine; the session is closed at the end of the test.
func (j *testJob) joinAsync(t *testing.T, n int, proc uint32, mut ...func(*Env, *Member, *ClientConfig)) <-chan joinResult {
	ch := make(chan joinResult, 1)
	env, self, cfg := j.joinerEnv(proc), joinerMember(n), LocalClientConfig()
	for _, m := range mut {
		m(&env, &self, &cfg)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		s, tb, id, err := JoinRunning(ctx, cfg, env, self)
		ch <- joinResult{s, tb, id, err}
	}()
	return ch
}

func recvJoin(t *testing.T, ch <-chan joinResult) joinResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.sess != nil {
			t.Cleanup(func() { r.sess.Close() })
		}
		return r
	case <-time.After(2 * testDeadline):
		t.Fatal("JoinRunning did not return")
		return joinResult{}
	}
}

// formJob registers processes 0..n-1 of j and returns their sessions.
func formJob(t *testing.T, j *testJob, n int) []*Session {
	t.Helper()
	var chans []<-chan regResult
	for p := range uint32(n) {
		chans = append(chans, j.registerAsync(t, p))
	}
	var out []*Session
	for p, ch := range chans {
		r := recv(t, ch)
		if r.err != nil {
			t.Fatalf("proc %d: %v", p, r.err)
		}
		out = append(out, r.sess)
	}
	return out
}

// nextReport returns the next report, failing after testDeadline.
func nextReport(t *testing.T, s *Server) Report {
	t.Helper()
	select {
	case r := <-s.Reports():
		return r
	case <-time.After(testDeadline):
		t.Fatal("no report delivered")
		return Report{}
	}
}

// Rule: a joiner gets an id no process of the job ever had (a reserved one
// if the launcher reserved one, else the next), and the original table,
// RefillWait included; it stays connected like a registered process, and
// the server reports it with KindJoined.
func TestJoinersGetNewIDsAndTheOriginalTable(t *testing.T) {
	j := startServer(t, 4, 3, func(c *ServerConfig) { c.RefillWait = 7 * time.Second })
	formJob(t, j, 4)
	want, ok := j.srv.Table()
	if !ok || want.RefillWait != 7*time.Second || want.NumProcs() != 4 {
		t.Fatalf("server table %+v, %v: want 4 processes and RefillWait 7s", want, ok)
	}
	reserved, err := j.srv.Reserve()
	if err != nil || reserved != 4 {
		t.Fatalf("Reserve = %d, %v; want 4", reserved, err)
	}
	a := j.joinAsync(t, 0, reserved)
	b := j.joinAsync(t, 1, JoinerID)
	ra, rb := recvJoin(t, a), recvJoin(t, b)
	if ra.err != nil || rb.err != nil {
		t.Fatalf("joiners: %v; %v", ra.err, rb.err)
	}
	if ra.id != 4 || rb.id != 5 {
		t.Fatalf("ids %d and %d, want 4 (reserved) and 5 (assigned)", ra.id, rb.id)
	}
	for _, r := range []joinResult{ra, rb} {
		tbl := r.table
		tbl.Joined = nil // which of the two registered first is up to the scheduler
		if !reflect.DeepEqual(tbl, want) {
			t.Errorf("joiner %d got table %+v, want the original %+v", r.id, r.table, want)
		}
		if r.sess.Self().Proc != r.id {
			t.Errorf("joiner %d's session is for process %d", r.id, r.sess.Self().Proc)
		}
		if !j.srv.Connected(r.id) {
			t.Errorf("Connected(%d) = false for a registered joiner", r.id)
		}
		m, ok := j.srv.Member(r.id)
		n := int(r.id) - 4
		if exp := joinerMember(n); !ok || m.Proc != r.id || m.Addr != exp.Addr || m.Pid != exp.Pid || m.Host != "hj" || m.Extra["raft"] != exp.Extra["raft"] {
			t.Errorf("Member(%d) = %+v, %v", r.id, m, ok)
		}
	}
	got := map[Report]bool{nextReport(t, j.srv): true, nextReport(t, j.srv): true}
	for _, id := range []uint32{4, 5} {
		w := Report{Proc: id, Kind: KindJoined, Rank: -1, Text: fmt.Sprintf("pid %d on hj", 90000+id-4)}
		if !got[w] {
			t.Errorf("reports %v lack %+v", got, w)
		}
	}
	if m, ok := j.srv.Member(2); !ok || m.Proc != 2 || m.Addr != memberFor(2).Addr {
		t.Errorf("Member(2) = %+v, %v", m, ok)
	}
	if _, ok := j.srv.Member(6); ok {
		t.Error("Member(6) found, but nobody has id 6")
	}
	if st := j.srv.Stats(); st.Registered != 4 || st.Joiners != 2 || st.Connected != 6 {
		t.Errorf("stats = %+v, want 4 registered, 2 joiners, 6 connected", st)
	}
	// A later joiner learns the earlier ones, whom it can ask for the
	// membership once the first processes are gone.
	rc := recvJoin(t, j.joinAsync(t, 2, JoinerID))
	if rc.err != nil || rc.id != 6 {
		t.Fatalf("third joiner: id %d, %v; want 6", rc.id, rc.err)
	}
	if len(rc.table.Joined) != 2 || rc.table.Joined[0].Proc != 4 || rc.table.Joined[1].Proc != 5 ||
		rc.table.Joined[0].Extra["raft"] != joinerMember(0).Extra["raft"] {
		t.Fatalf("third joiner's Table.Joined = %+v, want the records of joiners 4 and 5", rc.table.Joined)
	}
}

// Rule: a joiner's reports carry its id, and when its connection closes
// the server reports KindDisconnected after them; its record stays.
func TestJoinerReportsAndDisconnect(t *testing.T) {
	j := startServer(t, 2, 1)
	formJob(t, j, 2)
	r := recvJoin(t, j.joinAsync(t, 0, JoinerID))
	if r.err != nil || r.id != 2 {
		t.Fatalf("joiner: id %d, %v", r.id, r.err)
	}
	r.sess.Report(Report{Kind: KindRole, Rank: 1, Epoch: 4})
	r.sess.Close()
	for i, w := range []Report{
		{Proc: 2, Kind: KindJoined, Rank: -1, Text: "pid 90000 on hj"},
		{Proc: 2, Kind: KindRole, Rank: 1, Epoch: 4},
		{Proc: 2, Kind: KindDisconnected, Rank: -1},
	} {
		if got := nextReport(t, j.srv); !reflect.DeepEqual(got, w) {
			t.Fatalf("report %d = %+v, want %+v", i, got, w)
		}
	}
	if j.srv.Connected(2) {
		t.Error("Connected(2) after the joiner's KindDisconnected")
	}
	if m, ok := j.srv.Member(2); !ok || m.Pid != 90000 {
		t.Errorf("Member(2) after disconnect = %+v, %v; want the record kept", m, ok)
	}
}

// Rule: a joiner that comes before the table is complete is acknowledged
// (with its id) and answered when the last process registers.
func TestJoinerBeforeTableCompletes(t *testing.T) {
	j := startServer(t, 2, 2, func(c *ServerConfig) { c.RefillWait = time.Second })
	first := j.registerAsync(t, 0)
	j.log.wait(t, "registered", "proc=0")
	joiner := j.joinAsync(t, 0, JoinerID)
	j.log.wait(t, "a process joined the running job", "proc=2", "table_sent=false")
	select {
	case r := <-joiner:
		t.Fatalf("the joiner returned before the table was complete: %+v", r)
	default:
	}
	second := j.registerAsync(t, 1)
	for _, ch := range []<-chan regResult{first, second} {
		if r := recv(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	r := recvJoin(t, joiner)
	want, _ := j.srv.Table()
	if r.err != nil || r.id != 2 || !reflect.DeepEqual(r.table, want) || r.table.RefillWait != time.Second {
		t.Fatalf("joiner: id %d, table %+v, %v; want id 2 and %+v", r.id, r.table, r.err, want)
	}
}

// Rule: a joiner with the wrong token is refused in the handshake, and the
// job's registered processes do not notice.
func TestJoinerWrongTokenLeavesJobUndisturbed(t *testing.T) {
	j := startServer(t, 4, 4)
	sessions := formJob(t, j, 4)
	r := recvJoin(t, j.joinAsync(t, 0, JoinerID, func(e *Env, _ *Member, c *ClientConfig) {
		e.Token = auth.NewToken()
		c.AuthAttempts = 2
	}))
	if !errors.Is(r.err, ErrAuth) || !strings.Contains(r.err.Error(), "PGAS_TOKEN") {
		t.Fatalf("wrong token: %v, want ErrAuth naming PGAS_TOKEN", r.err)
	}
	for p, s := range sessions {
		select {
		case <-s.Lost():
			t.Errorf("process %d lost its session", p)
		default:
		}
		if !j.srv.Connected(uint32(p)) {
			t.Errorf("Connected(%d) = false", p)
		}
	}
	sessions[3].Report(Report{Kind: KindEvent, Rank: 3, Text: "still here"})
	if got := nextReport(t, j.srv); got.Proc != 3 || got.Text != "still here" {
		t.Fatalf("report %+v, want process 3's event (and no report about the intruder)", got)
	}
	// The client can see its handshake fail before the server counted it:
	// wait for the count, bounded.
	for deadline := time.Now().Add(testDeadline); ; time.Sleep(5 * time.Millisecond) {
		st := j.srv.Stats()
		if st.Joiners != 0 || st.Connected != 4 {
			t.Fatalf("stats = %+v, want no joiner and the 4 connections", st)
		}
		if st.Refused >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want the 2 handshakes refused", st)
		}
	}
}

// Rule: everything but a fresh joiner, a reserved id's first process, or
// the same process reconnecting is rejected with a reason, and does not
// disturb the job.
func TestJoinerRejected(t *testing.T) {
	j := startServer(t, 2, 1)
	sessions := formJob(t, j, 2)
	reserved, err := j.srv.Reserve()
	if err != nil || reserved != 2 {
		t.Fatalf("Reserve = %d, %v", reserved, err)
	}
	owner := recvJoin(t, j.joinAsync(t, 0, reserved))
	if owner.err != nil || owner.id != reserved {
		t.Fatalf("reserved joiner: id %d, %v", owner.id, owner.err)
	}
	cases := []struct {
		name string
		proc uint32
		mut  func(*Env, *Member, *ClientConfig)
		want string
	}{
		{"unreserved id", 9, nil, "process id 9 was not reserved"},
		{"an original id", 1, nil, "belongs to the processes the job was started with"},
		{"reserved id taken", reserved, nil, "joiner id 2 is taken by pid 90000"},
		{"other shape", JoinerID, func(e *Env, _ *Member, _ *ClientConfig) { e.NumProcs = 3 }, "started for a job of 3 processes"},
		{"other ranks", JoinerID, func(e *Env, _ *Member, _ *ClientConfig) { e.NumRanks = 2 }, "started for 2 ranks"},
		{"other job", JoinerID, func(e *Env, _ *Member, _ *ClientConfig) { e.JobID = "other" }, `belongs to job "other"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var muts []func(*Env, *Member, *ClientConfig)
			if c.mut != nil {
				muts = append(muts, c.mut)
			}
			r := recvJoin(t, j.joinAsync(t, 10+i, c.proc, muts...))
			var rej *RejectedError
			if !errors.As(r.err, &rej) || !errors.Is(r.err, ErrRejected) || !strings.Contains(rej.Reason, c.want) {
				t.Fatalf("got %v, want a rejection saying %q", r.err, c.want)
			}
			j.log.wait(t, "rejected registration", c.want)
		})
	}
	// The same process coming again gets its id back; its old connection
	// is the one replaced.
	again := recvJoin(t, j.joinAsync(t, 0, reserved))
	if again.err != nil || again.id != reserved {
		t.Fatalf("the reserved joiner reconnecting: id %d, %v", again.id, again.err)
	}
	select {
	case <-owner.sess.Lost():
	case <-time.After(testDeadline):
		t.Fatal("the replaced connection was not closed")
	}
	for p, s := range sessions {
		select {
		case <-s.Lost():
			t.Errorf("process %d lost its session", p)
		default:
		}
	}
	if st := j.srv.Stats(); st.Joiners != 1 || st.Connected != 3 {
		t.Fatalf("stats = %+v, want 1 joiner and 3 connections", st)
	}
}

// Rule: after Finish a joiner is told the job has ended (ErrJobFinished,
// at once: it exits 0), and so is one that waited for the table; Reserve
// hands out no more ids.
func TestJoinAfterFinish(t *testing.T) {
	j := startServer(t, 2, 2)
	waiting := j.joinAsync(t, 0, JoinerID)
	j.log.wait(t, "a process joined the running job", "table_sent=false")
	j.srv.Finish()
	r := recvJoin(t, waiting)
	if !errors.Is(r.err, ErrJobFinished) {
		t.Fatalf("waiting joiner: %v, want ErrJobFinished", r.err)
	}
	if d := nextReport(t, j.srv); d.Kind != KindJoined {
		t.Fatalf("report %+v, want KindJoined first", d)
	}
	if d := nextReport(t, j.srv); d.Kind != KindDisconnected || d.Proc != 2 {
		t.Fatalf("report %+v, want the waiting joiner's KindDisconnected", d)
	}
	j.srv.Finish() // idempotent
	start := time.Now()
	r = recvJoin(t, j.joinAsync(t, 1, JoinerID))
	var re *RegisterError
	if !errors.Is(r.err, ErrJobFinished) || !errors.As(r.err, &re) || re.Attempts != 1 || !strings.Contains(r.err.Error(), "has ended") {
		t.Fatalf("late joiner: %v, want ErrJobFinished after one attempt", r.err)
	}
	if d := time.Since(start); d > testDeadline/2 {
		t.Fatalf("the late joiner took %v to learn that the job ended", d)
	}
	if _, err := j.srv.Reserve(); !errors.Is(err, ErrJobFinished) {
		t.Fatalf("Reserve after Finish: %v, want ErrJobFinished", err)
	}
	// The job's own processes still register and report.
	for _, ch := range []<-chan regResult{j.registerAsync(t, 0), j.registerAsync(t, 1)} {
		if r := recv(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// Rule: ids are never handed out twice, whether reserved or assigned, and
// Reserve fails, without panicking, once the ids below MaxProcs are used.
func TestReserveNeverReusesIDs(t *testing.T) {
	j := startServer(t, 1, 1)
	formJob(t, j, 1)
	var got []uint32
	for range 3 {
		id, err := j.srv.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	r := recvJoin(t, j.joinAsync(t, 0, JoinerID))
	if r.err != nil {
		t.Fatal(r.err)
	}
	got = append(got, r.id)
	r.sess.Close() // a joiner that left: its id stays taken
	j.log.wait(t, "control connection closed", "proc=4")
	id, err := j.srv.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, id)
	if want := []uint32{1, 2, 3, 4, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}

	// Near the cap (no listener needed: Reserve is bookkeeping).
	s := NewServer(ServerConfig{NumProcs: MaxProcs - 2, NumRanks: 1})
	for _, want := range []uint32{MaxProcs - 2, MaxProcs - 1} {
		if id, err := s.Reserve(); err != nil || id != want {
			t.Fatalf("Reserve = %d, %v; want %d", id, err, want)
		}
	}
	if _, err := s.Reserve(); !errors.Is(err, ErrIDsUsedUp) || !strings.Contains(err.Error(), "no more processes can join") {
		t.Fatalf("Reserve past the cap: %v, want ErrIDsUsedUp", err)
	}
	s.mu.Lock()
	_, _, reason := s.joinerID(JoinerID, joinerMember(0))
	s.mu.Unlock()
	if !strings.Contains(reason, "no more processes can join") {
		t.Fatalf("a join hello past the cap: reason %q", reason)
	}
	s.Close()
	if _, err := s.Reserve(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reserve after Close: %v, want ErrClosed", err)
	}
}

// Rule: a joiner that cannot reach the rendezvous gives up within
// ClientConfig.Timeout, saying that the job may have ended.
func TestJoinerGivesUpWhenNobodyServes(t *testing.T) {
	j := &testJob{env: Env{Rendezvous: freePort(t), Token: auth.NewToken(), JobID: "job"}}
	r := recvJoin(t, j.joinAsync(t, 0, JoinerID, func(_ *Env, _ *Member, c *ClientConfig) {
		c.Timeout, c.WarnAfter = 300*time.Millisecond, 0
	}))
	if !errors.Is(r.err, ErrRendezvousTimeout) || !strings.Contains(r.err.Error(), "check that the job is still running") ||
		!strings.Contains(r.err.Error(), "a joiner without an id yet could not register") {
		t.Fatalf("got %v, want ErrRendezvousTimeout naming the joiner and the running job", r.err)
	}
}

// Rule: JoinRunning is for a joiner's environment only, and a joiner
// does not host the rendezvous; RegisterWith refuses a joiner's.
func TestJoinRunningBadArguments(t *testing.T) {
	env := Env{Join: true, Proc: JoinerID, Rendezvous: "127.0.0.1:1", Token: auth.NewToken(), Host: "h", Launcher: LauncherPGAS}
	ctx := context.Background()
	cfg := LocalClientConfig()
	serve := env
	serve.ServeRendezvous = true
	_, _, _, err := JoinRunning(ctx, cfg, serve, joinerMember(0))
	if !errors.Is(err, ErrConfig) || !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), "PGAS_SERVE_RENDEZVOUS") {
		t.Errorf("joiner serving the rendezvous: %v", err)
	}
	plain := Env{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: "127.0.0.1:1", Token: env.Token, Host: "h"}
	if _, _, _, err := JoinRunning(ctx, cfg, plain, joinerMember(0)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "PGAS_JOIN=1") {
		t.Errorf("JoinRunning without PGAS_JOIN: %v", err)
	}
	if _, _, err := RegisterWith(ctx, cfg, env, memberFor(0)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "JoinRunning") {
		t.Errorf("RegisterWith for a joiner: %v", err)
	}
	low := env
	low.NumProcs, low.Proc = 4, 2
	if _, _, _, err := JoinRunning(ctx, cfg, low, joinerMember(0)); !errors.Is(err, ErrEnv) {
		t.Errorf("a joiner presenting an original id: %v", err)
	}
	if _, _, _, err := JoinRunning(ctx, cfg, env, Member{Addr: "nope"}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad member: %v", err)
	}
}

// A joiner's log lines name it without the sentinel id.
func TestJoinerLogsNoSentinel(t *testing.T) {
	j := startServer(t, 1, 1)
	formJob(t, j, 1)
	rec := newLogRecorder()
	r := recvJoin(t, j.joinAsync(t, 0, JoinerID, func(_ *Env, _ *Member, c *ClientConfig) { c.Logger = slog.New(rec) }))
	if r.err != nil {
		t.Fatal(r.err)
	}
	line := j.log.wait(t, "a process joined the running job", "proc=1")
	if strings.Contains(line, fmt.Sprint(JoinerID)) {
		t.Errorf("log line shows the sentinel id: %s", line)
	}
}

// Rule: a joiner that loses its connection after the rendezvous gave it an
// id comes back as itself (the ack carried the id), and does not take a
// second one.
func TestJoinerReconnectsAsItself(t *testing.T) {
	j := startServer(t, 2, 2)
	first := j.registerAsync(t, 0)
	j.log.wait(t, "registered", "proc=0")
	joiner := j.joinAsync(t, 0, JoinerID)
	j.log.wait(t, "a process joined the running job", "proc=2", "table_sent=false")
	j.srv.mu.Lock()
	sc := j.srv.jregs[2]
	j.srv.mu.Unlock()
	sc.rw.Close() // cut the joiner's connection from the server's side
	j.log.wait(t, "a joiner reconnected", "proc=2")
	second := j.registerAsync(t, 1)
	for _, ch := range []<-chan regResult{first, second} {
		if r := recv(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	r := recvJoin(t, joiner)
	if r.err != nil || r.id != 2 {
		t.Fatalf("joiner after a reconnect: id %d, %v; want 2", r.id, r.err)
	}
	if id, err := j.srv.Reserve(); err != nil || id != 3 {
		t.Fatalf("Reserve = %d, %v; want 3 (one id used)", id, err)
	}
	if st := j.srv.Stats(); st.Joiners != 1 {
		t.Fatalf("stats = %+v, want 1 joiner", st)
	}
}
