package bootstrap

// What every process reads the same way once it knows who it is (its
// source, identity.go): the rendezvous and the token first, then the
// host, the job and the tunables, one row of settings each.

import (
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// A setting is one variable every process reads into its Env.
type setting struct {
	name string
	// read takes the variable's value, set and not empty.
	read func(e *Env, v string) error
	// unset handles the variable unset (or empty) for a process that src
	// started; nil: e stays as it is.
	unset func(e *Env, src *source) error
}

// apply reads s into e.
func (s setting) apply(e *Env, get getter, src *source) error {
	if v, ok := get(s.name); ok {
		return s.read(e, v)
	}
	if s.unset != nil {
		return s.unset(e, src)
	}
	return nil
}

// settings are read in this order, after the identity.
var settings = []setting{
	{VarRendezvous, readRendezvous, required(VarRendezvous, "processes cannot find each other without it",
		"set it to the host:port of the rendezvous (gaspirun sets it for you)",
		"a joiner must be told where the running job's rendezvous is: set it to the PGAS_RENDEZVOUS the job's processes have",
		func(src *source) string {
			return fmt.Sprintf("under %s you must set it yourself, to a host:port that process 0 can listen on and every process can reach; process 0 hosts the rendezvous there (%s)", src.how(), src.example)
		})},
	{VarToken, readToken, required(VarToken, "the job's connections authenticate with it",
		"gaspirun sets it for you",
		"a joiner must prove it belongs to the running job: set it to the PGAS_TOKEN the job's processes have",
		func(src *source) string {
			return fmt.Sprintf("under %s you must set it yourself, to the same secret in every process, e.g. export PGAS_TOKEN=$(gaspirun --new-token) or $(openssl rand -hex 32)", src.how())
		})},
	{VarHost, func(e *Env, v string) error { e.Host = v; return nil }, defaultHost},
	{VarJobID, func(e *Env, v string) error { e.JobID = v; return nil }, nil},
	{VarStateDir, func(e *Env, v string) error { e.StateDir = v; return nil }, nil},
	{VarServeRendezvous, readServeRendezvous, defaultServeRendezvous},
	durationSetting(VarRendezvousTimeout, time.Second, func(e *Env) *time.Duration { return &e.RendezvousTimeout },
		"give how long a process may wait for the rendezvous and the other processes, e.g. 60s or 5m (default 60s)"),
	durationSetting(VarRefillWait, 0, func(e *Env) *time.Duration { return &e.RefillWait },
		"give how long a rank lost with no spare left may wait for a process that joins the job, e.g. 60s, or 0 for no wait"),
	durationSetting(VarCutOff, minCutOff, func(e *Env) *time.Duration { return &e.CutOff },
		"give how long a process may be without contact with a membership quorum before it exits, e.g. 10s (the default) or 30s"),
	flagSetting(VarOnDeath, "abort", []string{"continue"}, func(e *Env) *bool { return &e.DeathAborts },
		"is not abort or continue", "leave it to the launcher: gaspirun sets it with --on-death abort"),
	flagSetting(VarTLS, "1", []string{"0"}, func(e *Env) *bool { return &e.TLS }, "not 1 or 0",
		"use 1 for mutual TLS on every connection of the job (the same in every process; gaspirun --tls sets it), or 0 (or unset) for none"),
	{VarRacks, readRacks, nil},
}

func readRendezvous(e *Env, v string) error {
	if err := checkAddr(v); err != nil {
		return &EnvError{Var: VarRendezvous, Value: v, Problem: err.Error(), Fix: "use host:port, e.g. node1:29400 or 10.0.0.5:29400"}
	}
	e.Rendezvous = v
	return nil
}

func readToken(e *Env, v string) error {
	tok, err := auth.ParseToken(v)
	if err != nil {
		problem := "not a job token (want at least 32 hex digits)"
		if tok, _ := hex.DecodeString(v); len(tok) >= auth.MinTokenSize {
			problem = "a weak job token: " + auth.TokenWeakness(tok)
		}
		return &EnvError{Var: VarToken, Value: redact(v), Problem: problem,
			Fix: "generate one with gaspirun --new-token or openssl rand -hex 32, and give every process the same"}
	}
	e.Token = tok
	return nil
}

// required is the unset handler of a variable no process can do
// without: problem says why, and the fix is fix for gaspirun's
// processes, joiner for a joiner, and other's for a process another
// launcher (src) started.
func required(name, problem, fix, joiner string, other func(src *source) string) func(*Env, *source) error {
	return func(e *Env, src *source) error {
		f := fix
		switch {
		case e.Join:
			f = joiner
		case e.Launcher != LauncherPGAS:
			f = other(src)
		}
		return &EnvError{Var: name, Unset: true, Problem: problem, Fix: f}
	}
}

// defaultHost: without PGAS_HOST, the launcher's host name (read with
// the identity), else this machine's.
func defaultHost(e *Env, _ *source) error {
	if e.Host != "" {
		return nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return &EnvError{Var: VarHost, Unset: true, Problem: fmt.Sprintf("and the hostname is unknown (%v)", err),
			Fix: "set PGAS_HOST to a label for this machine"}
	}
	e.Host = h
	return nil
}

func readServeRendezvous(e *Env, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return &EnvError{Var: VarServeRendezvous, Value: v, Problem: "not a boolean",
			Fix: "use 1 (this process hosts the rendezvous) or 0"}
	}
	e.ServeRendezvous = b
	return nil
}

// defaultServeRendezvous: under another launcher than gaspirun, process 0
// hosts the rendezvous.
func defaultServeRendezvous(e *Env, _ *source) error {
	if e.Launcher != LauncherPGAS {
		e.ServeRendezvous = e.Proc == 0
	}
	return nil
}

// durationSetting reads a duration (parseDuration) of at least min into
// the field of e that field names.
func durationSetting(name string, min time.Duration, field func(*Env) *time.Duration, fix string) setting {
	return setting{name: name, read: func(e *Env, v string) error {
		d, err := parseDuration(name, v, min, fix)
		if err != nil {
			return err
		}
		*field(e) = d
		return nil
	}}
}

// parseDuration reads a duration variable: a Go duration ("90s", "2m") or
// a whole number of seconds, at least min.
func parseDuration(name, v string, min time.Duration, fix string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseInt(v, 10, 32)
		if nerr != nil {
			return 0, &EnvError{Var: name, Value: v, Problem: "not a duration (e.g. 30s, 2m) or a number of seconds", Fix: fix}
		}
		d = time.Duration(n) * time.Second
	}
	if d < min {
		return 0, &EnvError{Var: name, Value: v, Problem: fmt.Sprintf("below the minimum of %v", min), Fix: fix}
	}
	return d, nil
}

// flagSetting reads a variable that turns the field of e that field
// names on with the value on, leaves it off with one of off, and is wrong
// otherwise.
func flagSetting(name, on string, off []string, field func(*Env) *bool, problem, fix string) setting {
	return setting{name: name, read: func(e *Env, v string) error {
		switch {
		case v == on:
			*field(e) = true
		case slices.Contains(off, v):
		default:
			return &EnvError{Var: name, Value: v, Problem: problem, Fix: fix}
		}
		return nil
	}}
}
