package bootstrap

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

var testToken = auth.FormatToken(auth.NewToken())

func lookupMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

var native = map[string]string{
	"PGAS_PROC":       "2",
	"PGAS_NPROCS":     "5",
	"PGAS_NRANKS":     "4",
	"PGAS_RENDEZVOUS": "127.0.0.1:4000",
	"PGAS_TOKEN":      testToken,
	"PGAS_HOST":       "hostA",
	"PGAS_JOB_ID":     "job-1",
	"PGAS_STATE_DIR":  "/tmp/state",
}

func TestFromLookupNative(t *testing.T) {
	e, err := FromLookup(lookupMap(native))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.ParseToken(testToken)
	want := Env{Proc: 2, NumProcs: 5, NumRanks: 4, Rendezvous: "127.0.0.1:4000", Token: tok, Host: "hostA",
		JobID: "job-1", StateDir: "/tmp/state", Launcher: LauncherPGAS}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("got %+v\nwant %+v", e, want)
	}
	if r, ok := e.InitialRank(); !ok || r != 2 || e.NumSpares() != 1 {
		t.Fatalf("InitialRank = %d,%v NumSpares = %d", r, ok, e.NumSpares())
	}
	s, _ := FromLookup(lookupMap(with(native, "PGAS_PROC", "4")))
	if r, ok := s.InitialRank(); ok || r != -1 {
		t.Fatalf("proc 4 of 4 ranks: InitialRank = %d,%v, want spare", r, ok)
	}
}

func TestFromLookupDefaults(t *testing.T) {
	cases := []struct {
		name      string
		env       map[string]string
		wantRanks int
		wantServe bool
	}{
		{"nranks defaults to nprocs", with(native, "PGAS_NRANKS", "<unset>"), 5, false},
		{"spares", with(native, "PGAS_NRANKS", "<unset>", "PGAS_SPARES", "2"), 3, false},
		{"spares and nranks agree", with(native, "PGAS_SPARES", "1"), 4, false},
		{"empty nranks is unset", with(native, "PGAS_NRANKS", " "), 5, false},
		{"serve", with(native, "PGAS_SERVE_RENDEZVOUS", "1"), 4, true},
		{"serve off", with(native, "PGAS_SERVE_RENDEZVOUS", "0"), 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := FromLookup(lookupMap(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if e.NumRanks != c.wantRanks || e.ServeRendezvous != c.wantServe {
				t.Fatalf("NumRanks=%d Serve=%v, want %d %v", e.NumRanks, e.ServeRendezvous, c.wantRanks, c.wantServe)
			}
		})
	}
}

func TestFromLookupForeign(t *testing.T) {
	common := map[string]string{"PGAS_RENDEZVOUS": "node1:29400", "PGAS_TOKEN": testToken}
	cases := []struct {
		name string
		env  map[string]string
		want Env // Token and Host checked separately when empty
	}{
		{"slurm proc 0", with(common, "SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_JOB_ID", "77", "SLURMD_NODENAME", "n1"),
			Env{Proc: 0, NumProcs: 4, NumRanks: 4, Rendezvous: "node1:29400", Host: "n1", JobID: "77", ServeRendezvous: true, Launcher: LauncherSlurm}},
		{"slurm proc 3 with spares", with(common, "SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURMD_NODENAME", "n2", "PGAS_SPARES", "1"),
			Env{Proc: 3, NumProcs: 4, NumRanks: 3, Rendezvous: "node1:29400", Host: "n2", Launcher: LauncherSlurm}},
		{"slurm step of 4 tasks in an allocation of 8", with(common, "SLURM_PROCID", "2", "SLURM_NTASKS", "8", "SLURM_STEP_NUM_TASKS", "4", "SLURMD_NODENAME", "n1"),
			Env{Proc: 2, NumProcs: 4, NumRanks: 4, Rendezvous: "node1:29400", Host: "n1", Launcher: LauncherSlurm}},
		{"slurm old NPROCS, PGAS overrides host and job", with(common, "SLURM_PROCID", "1", "SLURM_NPROCS", "2", "SLURMD_NODENAME", "n2", "PGAS_HOST", "fake", "PGAS_JOB_ID", "j", "SLURM_JOB_ID", "9"),
			Env{Proc: 1, NumProcs: 2, NumRanks: 2, Rendezvous: "node1:29400", Host: "fake", JobID: "j", Launcher: LauncherSlurm}},
		{"open mpi", with(common, "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "3", "PGAS_HOST", "h"),
			Env{Proc: 1, NumProcs: 3, NumRanks: 3, Rendezvous: "node1:29400", Host: "h", Launcher: LauncherOpenMPI}},
		{"pmi", with(common, "PMI_RANK", "0", "PMI_SIZE", "2", "PGAS_HOST", "h", "PGAS_NRANKS", "1"),
			Env{Proc: 0, NumProcs: 2, NumRanks: 1, Rendezvous: "node1:29400", Host: "h", ServeRendezvous: true, Launcher: LauncherPMI}},
		{"kubernetes", with(common, "JOB_COMPLETION_INDEX", "2", "PGAS_NPROCS", "3", "PGAS_HOST", "pod-2"),
			Env{Proc: 2, NumProcs: 3, NumRanks: 3, Rendezvous: "node1:29400", Host: "pod-2", Launcher: LauncherKubernetes}},
		{"serve explicitly off under slurm", with(common, "SLURM_PROCID", "0", "SLURM_NTASKS", "2", "PGAS_HOST", "h", "PGAS_SERVE_RENDEZVOUS", "false"),
			Env{Proc: 0, NumProcs: 2, NumRanks: 2, Rendezvous: "node1:29400", Host: "h", Launcher: LauncherSlurm}},
		{"PGAS_PROC wins over slurm", with(native, "SLURM_PROCID", "0", "SLURM_NTASKS", "9"),
			Env{Proc: 2, NumProcs: 5, NumRanks: 4, Rendezvous: "127.0.0.1:4000", Host: "hostA", JobID: "job-1", StateDir: "/tmp/state", Launcher: LauncherPGAS}},
	}
	tok, _ := auth.ParseToken(testToken)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := FromLookup(lookupMap(c.env))
			if err != nil {
				t.Fatal(err)
			}
			c.want.Token = tok
			if !reflect.DeepEqual(e, c.want) {
				t.Fatalf("got  %+v\nwant %+v", e, c.want)
			}
		})
	}
}

func TestFromLookupErrors(t *testing.T) {
	slurm := map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "PGAS_RENDEZVOUS": "n1:1", "PGAS_TOKEN": testToken, "PGAS_HOST": "h"}
	cases := []struct {
		name    string
		env     map[string]string
		wantVar string
		want    []string // substrings of the message
	}{
		{"nothing set", map[string]string{}, "PGAS_PROC", []string{"not started by gaspirun", "gaspirun -n N"}},
		{"no nprocs", with(native, "PGAS_NPROCS", "<unset>"), "PGAS_NPROCS", []string{"not set", "ranks plus spares"}},
		{"nprocs not a number", with(native, "PGAS_NPROCS", "five"), "PGAS_NPROCS", []string{`"five"`, "not a whole number"}},
		{"nprocs zero", with(native, "PGAS_NPROCS", "0"), "PGAS_NPROCS", []string{"out of range 1..65536"}},
		{"proc out of range", with(native, "PGAS_PROC", "5"), "PGAS_PROC", []string{"out of range 0..4", "PGAS_NPROCS=5"}},
		{"negative proc", with(native, "PGAS_PROC", "-1"), "PGAS_PROC", []string{"out of range"}},
		{"nranks too big", with(native, "PGAS_NRANKS", "6"), "PGAS_NRANKS", []string{"1..5"}},
		{"spares leave no rank", with(native, "PGAS_NRANKS", "<unset>", "PGAS_SPARES", "5"), "PGAS_SPARES", []string{"at least one rank"}},
		{"spares disagree", with(native, "PGAS_SPARES", "3"), "PGAS_NRANKS", []string{"PGAS_SPARES=3", "only one"}},
		{"no rendezvous", with(native, "PGAS_RENDEZVOUS", "<unset>"), "PGAS_RENDEZVOUS", []string{"not set", "gaspirun sets it"}},
		{"bad rendezvous", with(native, "PGAS_RENDEZVOUS", "node1"), "PGAS_RENDEZVOUS", []string{`"node1"`, "host:port"}},
		{"rendezvous port zero", with(native, "PGAS_RENDEZVOUS", "node1:0"), "PGAS_RENDEZVOUS", []string{"1..65535"}},
		{"no token", with(native, "PGAS_TOKEN", "<unset>"), "PGAS_TOKEN", []string{"not set"}},
		{"bad token", with(native, "PGAS_TOKEN", "abcdefgh"), "PGAS_TOKEN", []string{"not a job token", "--new-token"}},
		{"zero token", with(native, "PGAS_TOKEN", strings.Repeat("0", 64)), "PGAS_TOKEN", []string{"a weak job token: all 32 bytes are 0x00", "--new-token"}},
		{"hex text token", with(native, "PGAS_TOKEN", auth.FormatToken([]byte("0123456789abcdef0123456789abcdef"))), "PGAS_TOKEN", []string{"a weak job token: a pattern of 16 bytes repeated", "--new-token"}},
		{"bad serve", with(native, "PGAS_SERVE_RENDEZVOUS", "yes please"), "PGAS_SERVE_RENDEZVOUS", []string{"not a boolean"}},
		{"bad host", with(native, "PGAS_HOST", "a b"), "PGAS_HOST", []string{"space"}},
		{"bad rendezvous timeout", with(native, "PGAS_RENDEZVOUS_TIMEOUT", "soon"), "PGAS_RENDEZVOUS_TIMEOUT", []string{"not a duration", "60s"}},
		{"rendezvous timeout too short", with(native, "PGAS_RENDEZVOUS_TIMEOUT", "10ms"), "PGAS_RENDEZVOUS_TIMEOUT", []string{"minimum of 1s"}},
		{"bad cutoff", with(native, "PGAS_CUTOFF", "-3s"), "PGAS_CUTOFF", []string{"minimum of 1s", "10s"}},
		{"cutoff not a duration", with(native, "PGAS_CUTOFF", "ten"), "PGAS_CUTOFF", []string{"not a duration"}},
		{"tls not 0 or 1", with(native, "PGAS_TLS", "yes"), "PGAS_TLS", []string{"not 1 or 0", "gaspirun --tls"}},
		{"racks without =", with(native, "PGAS_RACKS", "rack1:node1"), "PGAS_RACKS", []string{"no '='", "RACK=HOST,HOST"}},
		{"a host on two racks", with(native, "PGAS_RACKS", "r1=a,b;r2=b"), "PGAS_RACKS", []string{`host "b" is on racks "r1" and "r2"`}},
		{"an empty host", with(native, "PGAS_RACKS", "r1=a,,b"), "PGAS_RACKS", []string{"empty host label"}},
		{"an empty rack", with(native, "PGAS_RACKS", "=a"), "PGAS_RACKS", []string{"empty rack label"}},
		{"racks of nothing", with(native, "PGAS_RACKS", " ; "), "PGAS_RACKS", []string{"names no rack"}},
		{"slurm without rendezvous", with(slurm, "PGAS_RENDEZVOUS", "<unset>"), "PGAS_RENDEZVOUS", []string{"under Slurm", "must set it yourself", "process 0"}},
		{"slurm without token", with(slurm, "PGAS_TOKEN", "<unset>"), "PGAS_TOKEN", []string{"under Slurm", "must set it yourself", "same secret"}},
		{"slurm nprocs disagrees", with(slurm, "PGAS_NPROCS", "5"), "PGAS_NPROCS", []string{"SLURM_NTASKS=4"}},
		{"slurm procid out of range", with(slurm, "SLURM_PROCID", "4"), "SLURM_PROCID", []string{"out of range 0..3", "SLURM_NTASKS=4"}},
		{"slurm without ntasks", with(slurm, "SLURM_NTASKS", "<unset>"), "PGAS_NPROCS", []string{"Slurm", "unknown"}},
		{"kubernetes without nprocs", map[string]string{"JOB_COMPLETION_INDEX": "0", "PGAS_RENDEZVOUS": "a:1", "PGAS_TOKEN": testToken}, "PGAS_NPROCS", []string{"completions"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromLookup(lookupMap(c.env))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrEnv) {
				t.Fatalf("%v does not wrap ErrEnv", err)
			}
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != c.wantVar {
				t.Fatalf("error %q names %v, want %s", err, ee, c.wantVar)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error %q leaks the token", err)
			}
		})
	}
}

// Durations are Go durations or whole seconds.
func TestFromLookupDurations(t *testing.T) {
	e, err := FromLookup(lookupMap(with(native, "PGAS_RENDEZVOUS_TIMEOUT", "120", "PGAS_CUTOFF", "1m30s")))
	if err != nil {
		t.Fatal(err)
	}
	if e.RendezvousTimeout != 2*time.Minute || e.CutOff != 90*time.Second {
		t.Fatalf("RendezvousTimeout %v CutOff %v, want 2m and 1m30s", e.RendezvousTimeout, e.CutOff)
	}
	for v, want := range map[string]bool{"1": true, "0": false, "": false} {
		e, err := FromLookup(lookupMap(with(native, "PGAS_TLS", v)))
		if err != nil || e.TLS != want {
			t.Fatalf("PGAS_TLS=%q: TLS %v, %v; want %v", v, e.TLS, err, want)
		}
	}
	e, err = FromLookup(lookupMap(native))
	if err != nil || e.RendezvousTimeout != 0 || e.CutOff != 0 || e.TLS {
		t.Fatalf("unset: %v %v %v, want zero (the defaults)", e.RendezvousTimeout, e.CutOff, err)
	}
}

// PGAS_RACKS maps host labels to rack labels; spaces around separators
// and empty entries are ignored.
func TestFromLookupRacks(t *testing.T) {
	e, err := FromLookup(lookupMap(with(native, "PGAS_RACKS", " rack1 = node1, node2 ;rack2=node3; ")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node1": "rack1", "node2": "rack1", "node3": "rack2"}
	if !reflect.DeepEqual(e.Racks, want) {
		t.Fatalf("Racks %v, want %v", e.Racks, want)
	}
	if got := FormatRacks(want); got != "rack1=node1,node2;rack2=node3" {
		t.Fatalf("FormatRacks: %q", got)
	}
}

func TestEnvironRoundTrip(t *testing.T) {
	tok := auth.NewToken()
	for _, e := range []Env{
		{Proc: 3, NumProcs: 4, NumRanks: 2, Rendezvous: "127.0.0.1:1234", Token: tok, Host: "h1", JobID: "j", StateDir: "/s", ServeRendezvous: true, Launcher: LauncherPGAS},
		{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: "[::1]:9", Token: tok, Host: "h", Launcher: LauncherPGAS},
		{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS, RendezvousTimeout: 90 * time.Second, CutOff: 2500 * time.Millisecond},
		{Proc: 1, NumProcs: 2, NumRanks: 2, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS, TLS: true},
		{Proc: 1, NumProcs: 2, NumRanks: 2, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS, DeathAborts: true},
		{Proc: 1, NumProcs: 2, NumRanks: 2, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS,
			Racks: map[string]string{"node1": "r1", "node2": "r1", "h": "r2"}},
	} {
		m := map[string]string{}
		for _, kv := range e.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		got, err := FromLookup(lookupMap(m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
}

func TestEnvValidate(t *testing.T) {
	good := Env{Proc: 1, NumProcs: 2, NumRanks: 1, Rendezvous: "h:1", Token: auth.NewToken(), Host: "h"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mut     func(*Env)
		wantVar string
	}{
		{func(e *Env) { e.NumProcs = 0 }, VarNumProcs},
		{func(e *Env) { e.NumRanks = 3 }, VarNumRanks},
		{func(e *Env) { e.Proc = 2 }, VarProc},
		{func(e *Env) { e.Rendezvous = "" }, VarRendezvous},
		{func(e *Env) { e.Token = nil }, VarToken},
		{func(e *Env) { e.Token = make([]byte, 32) }, VarToken},
		{func(e *Env) { e.Host = "" }, VarHost},
	}
	for _, c := range cases {
		e := good
		c.mut(&e)
		err := e.Validate()
		var ee *EnvError
		if !errors.As(err, &ee) || ee.Var != c.wantVar {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", e, err, c.wantVar)
		}
	}
	if s := good.String(); strings.Contains(s, auth.FormatToken(good.Token)) {
		t.Errorf("String leaks the token: %s", s)
	}
}

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5":  "127.0.0.1:5",
		"localhost:5":  "localhost:5",
		"[::1]:5":      "[::1]:5",
		"node1:29400":  ":29400",
		"10.0.0.1:700": ":700",
	} {
		got, err := listenAddr(in)
		if err != nil || got != want {
			t.Errorf("listenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// PGAS_JOIN=1 marks a joiner: its id and counts are optional (the
// rendezvous and the member table have them), but a reserved id must be a
// joiner's, the counts it gives must hang together, and it must not host
// the rendezvous. Other launchers' ids are ignored; Slurm's host is not.
func TestFromLookupJoiner(t *testing.T) {
	tok, _ := auth.ParseToken(testToken)
	joiner := map[string]string{"PGAS_JOIN": "1", "PGAS_RENDEZVOUS": "node1:29400", "PGAS_TOKEN": testToken, "PGAS_HOST": "h9"}
	ok := []struct {
		name string
		env  map[string]string
		want Env
	}{
		{"nothing but the join", joiner,
			Env{Join: true, Proc: JoinerID, Rendezvous: "node1:29400", Host: "h9", Launcher: LauncherPGAS}},
		{"reserved id and counts", with(joiner, "PGAS_PROC", "6", "PGAS_NPROCS", "5", "PGAS_SPARES", "1", "PGAS_JOB_ID", "j"),
			Env{Join: true, Proc: 6, NumProcs: 5, NumRanks: 4, Rendezvous: "node1:29400", Host: "h9", JobID: "j", Launcher: LauncherPGAS}},
		{"ranks alone", with(joiner, "PGAS_NRANKS", "3"),
			Env{Join: true, Proc: JoinerID, NumRanks: 3, Rendezvous: "node1:29400", Host: "h9", Launcher: LauncherPGAS}},
		{"under slurm: its id ignored, its host taken", with(joiner, "PGAS_HOST", "<unset>", "SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_JOB_ID", "12", "SLURMD_NODENAME", "n3"),
			Env{Join: true, Proc: JoinerID, Rendezvous: "node1:29400", Host: "n3", Launcher: LauncherPGAS}},
		{"join 0 is a process of the job", with(native, "PGAS_JOIN", "0"),
			Env{Proc: 2, NumProcs: 5, NumRanks: 4, Rendezvous: "127.0.0.1:4000", Host: "hostA", JobID: "job-1", StateDir: "/tmp/state", Launcher: LauncherPGAS}},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			e, err := FromLookup(lookupMap(c.env))
			if err != nil {
				t.Fatal(err)
			}
			c.want.Token = tok
			if !reflect.DeepEqual(e, c.want) {
				t.Fatalf("got  %+v\nwant %+v", e, c.want)
			}
			if r, ok := e.InitialRank(); e.Join && (ok || r != -1) {
				t.Fatalf("a joiner's InitialRank = %d, %v; want a spare", r, ok)
			}
			if s := e.String(); e.Join && !strings.Contains(s, "joiner") {
				t.Fatalf("String %q does not say joiner", s)
			}
		})
	}
	bad := []struct {
		name    string
		env     map[string]string
		wantVar string
		want    string
	}{
		{"join not 0 or 1", with(joiner, "PGAS_JOIN", "yes"), VarJoin, "not 1 or 0"},
		{"id of the job's first processes", with(joiner, "PGAS_PROC", "2", "PGAS_NPROCS", "4"), VarProc, "must be 4..65535"},
		{"id below the ranks", with(joiner, "PGAS_PROC", "2", "PGAS_NRANKS", "4"), VarProc, "the lower ids belong to the processes the job was started with"},
		{"id past the cap", with(joiner, "PGAS_PROC", "65536"), VarProc, "out of range 0..65535"},
		{"serves the rendezvous", with(joiner, "PGAS_SERVE_RENDEZVOUS", "1"), VarServeRendezvous, "joins a running job whose rendezvous is served already"},
		{"spares without nprocs", with(joiner, "PGAS_SPARES", "1"), VarSpares, "set PGAS_NPROCS too"},
		{"spares disagree", with(joiner, "PGAS_NPROCS", "5", "PGAS_SPARES", "1", "PGAS_NRANKS", "2"), VarNumRanks, "disagrees with PGAS_SPARES=1"},
		{"no rendezvous", with(joiner, "PGAS_RENDEZVOUS", "<unset>"), VarRendezvous, "the running job's rendezvous"},
		{"no token", with(joiner, "PGAS_TOKEN", "<unset>"), VarToken, "the PGAS_TOKEN the job's processes have"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromLookup(lookupMap(c.env))
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != c.wantVar || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %s that says %q", err, c.wantVar, c.want)
			}
		})
	}
}

// Environ gives a joiner back exactly, whatever it knew of its id and
// counts.
func TestEnvironRoundTripJoiner(t *testing.T) {
	tok := auth.NewToken()
	for _, e := range []Env{
		{Join: true, Proc: JoinerID, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS},
		{Join: true, Proc: 7, NumProcs: 5, NumRanks: 3, Rendezvous: "n:9", Token: tok, Host: "h", JobID: "j", Launcher: LauncherPGAS, TLS: true},
		{Join: true, Proc: JoinerID, NumRanks: 3, Rendezvous: "n:9", Token: tok, Host: "h", Launcher: LauncherPGAS, CutOff: 3 * time.Second},
	} {
		m := map[string]string{}
		for _, kv := range e.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		got, err := FromLookup(lookupMap(m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
}

// A process no launcher started is told apart from one whose launcher's
// variables are wrong: only the first runs as a job of one (Singleton).
func TestNotLaunchedAndSingleton(t *testing.T) {
	for env, want := range map[string]bool{
		"":                       true,
		"HOME=/root":             true,
		"PGAS_PROC=0":            false,
		"PGAS_JOIN=1":            false,
		"SLURM_PROCID=3":         false,
		"OMPI_COMM_WORLD_RANK=1": false,
		"JOB_COMPLETION_INDEX=0": false,
		"PMI_RANK=0":             false,
		"PGAS_PROC=":             true,
	} {
		m := map[string]string{}
		if k, v, ok := strings.Cut(env, "="); ok {
			m[k] = v
		}
		if got := NotLaunched(lookupMap(m)); got != want {
			t.Errorf("%q: NotLaunched = %v, want %v", env, got, want)
		}
	}
	e := Singleton()
	if e.NumProcs != 1 || e.NumRanks != 1 || e.Proc != 0 || !e.ServeRendezvous || len(e.Token) == 0 || e.Launcher != LauncherNone {
		t.Errorf("Singleton() = %+v", e)
	}
}
