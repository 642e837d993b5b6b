package launch

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Rule: --metrics and --trace values that cannot work are refused before
// any process starts, naming the flag and what to give instead; good ones
// give the processes PGAS_METRICS=auto and PGAS_TRACE.
func TestObservabilityFlags(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		flag string
		want string
	}{
		{Config{Metrics: "not an address"}, "--metrics", "HOST:PORT"},
		{Config{Trace: "/nonexistent/dir/t.json"}, "--trace", "directory that exists"},
		{Config{Trace: "t.json", Hostfile: "hosts"}, "--trace", "local launcher only"},
	} {
		_, _, err := startObservability(c.cfg, nil)
		var fe *FlagError
		if !errors.As(err, &fe) || fe.Flag != c.flag || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want a %s error saying %q", c.cfg, err, c.flag, c.want)
		}
	}
	o, env, err := startObservability(Config{Metrics: "127.0.0.1:0", Trace: filepath.Join(t.TempDir(), "t.json")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	if len(env) != 2 || env[0] != "PGAS_METRICS=auto" || !strings.HasPrefix(env[1], "PGAS_TRACE=/") || o.MetricsAddr() == "" {
		t.Fatalf("env %v, metrics at %q", env, o.MetricsAddr())
	}
}
