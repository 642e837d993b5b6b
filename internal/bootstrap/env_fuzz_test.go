package bootstrap

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fuzzVars are the variables FromLookup reads, in the order the fuzzer's
// values are assigned to them.
var fuzzVars = []string{
	VarProc, VarNumProcs, VarNumRanks, VarSpares, VarRendezvous, VarToken, VarHost, VarJobID, VarStateDir, VarServeRendezvous,
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_ID", "SLURMD_NODENAME",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "JOB_COMPLETION_INDEX",
	VarJoin, // last, so that the stored corpus keeps its meaning
}

// fuzzEnv turns NUL-separated values into an environment: the i-th value
// goes to fuzzVars[i]; an empty value leaves the variable unset.
func fuzzEnv(vals string) map[string]string {
	m := map[string]string{}
	for i, v := range strings.SplitN(vals, "\x00", len(fuzzVars)) {
		if v != "" {
			m[fuzzVars[i]] = v
		}
	}
	return m
}

func envSeed(kv map[string]string) string {
	vals := make([]string, len(fuzzVars))
	for i, k := range fuzzVars {
		vals[i] = kv[k]
	}
	return strings.Join(vals, "\x00")
}

// FuzzFromLookup: the environment is the first input every process reads,
// set by a launcher or by hand. Any values give either a *EnvError naming
// a variable, whose text never holds the job token, or an Env that passes
// Validate and that Environ and FromLookup reproduce exactly (with launcher
// "pgas"); its String and log value never hold the token either.
func FuzzFromLookup(f *testing.F) {
	f.Add(envSeed(native))
	f.Add(envSeed(with(native, "PGAS_NRANKS", "<unset>", "PGAS_SPARES", "2", "PGAS_SERVE_RENDEZVOUS", "true")))
	f.Add(envSeed(with(native, "PGAS_NRANKS", "9")))
	f.Add(envSeed(with(native, "PGAS_TOKEN", "short")))
	f.Add(envSeed(with(native, "PGAS_RENDEZVOUS", "noport")))
	f.Add(envSeed(with(native, "PGAS_HOST", "two words")))
	f.Add(envSeed(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1",
		"PGAS_RENDEZVOUS": "n1:29400", "PGAS_TOKEN": testToken}))
	f.Add(envSeed(map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PGAS_NPROCS": "3",
		"PGAS_RENDEZVOUS": "h:1", "PGAS_TOKEN": testToken}))
	f.Add(envSeed(map[string]string{"JOB_COMPLETION_INDEX": "0", "PGAS_RENDEZVOUS": "h:1", "PGAS_TOKEN": testToken}))
	f.Add(envSeed(map[string]string{"PGAS_JOIN": "1", "PGAS_RENDEZVOUS": "h:1", "PGAS_TOKEN": testToken, "SLURM_PROCID": "3", "SLURMD_NODENAME": "n2"}))
	f.Add(envSeed(map[string]string{"PGAS_JOIN": "1", "PGAS_PROC": "7", "PGAS_NPROCS": "5", "PGAS_SPARES": "1", "PGAS_RENDEZVOUS": "h:1", "PGAS_TOKEN": testToken}))
	f.Add(envSeed(map[string]string{"PGAS_JOIN": "1", "PGAS_NRANKS": "3", "PGAS_RENDEZVOUS": "h:1", "PGAS_TOKEN": testToken}))
	f.Add("")
	f.Fuzz(func(t *testing.T, vals string) {
		m := fuzzEnv(vals)
		secret := strings.TrimSpace(m[VarToken])
		for k, v := range m {
			if k != VarToken && (strings.Contains(v, secret) || strings.Contains(strconv.Quote(v), secret)) {
				secret = "" // shown as (or inside the quoting of) another variable's value: not a leak
			}
		}
		// A long hex value cannot turn up in a message by chance.
		hexSecret := len(secret) >= 16 && strings.Trim(secret, "0123456789abcdefABCDEF") == ""
		leaks := func(s string) bool { return hexSecret && strings.Contains(s, secret) }
		e, err := FromLookup(lookupMap(m))
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var == "" {
				t.Fatalf("error %v is not a *EnvError naming a variable", err)
			}
			if leaks(err.Error()) {
				t.Fatalf("error shows the token: %v", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("FromLookup returned %+v, which fails Validate: %v", e, err)
		}
		if leaks(e.String()) || leaks(e.LogValue().String()) {
			t.Fatalf("String or LogValue shows the token")
		}
		again := map[string]string{}
		for _, kv := range e.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			again[k] = v
		}
		back, err := FromLookup(lookupMap(again))
		want := e
		want.Launcher = LauncherPGAS
		if err != nil || !reflect.DeepEqual(back, want) {
			t.Fatalf("Environ of %+v reads back as %+v, %v", e, back, err)
		}
	})
}
