package launch

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// Rule (--join-env): the file is owner-only and holds exactly what a
// process started by hand needs to join: read back as an environment, it
// is a joiner's, with the job's rendezvous and token.
func TestWriteJoinEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "join.env")
	want := bootstrap.Env{Join: true, Proc: bootstrap.JoinerID, Rendezvous: "127.0.0.1:4242", Token: auth.NewToken(), JobID: "job-7"}
	if err := writeJoinEnv(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: the file holds the job's token", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q is not NAME=VALUE", line)
		}
		vars[k] = v
	}
	got, err := bootstrap.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatalf("the file's environment does not parse: %v\n%s", err, data)
	}
	if _, ok := vars["PGAS_PROC"]; ok {
		t.Errorf("the file sets PGAS_PROC=%s: a process started by hand must leave it to the rendezvous", vars["PGAS_PROC"])
	}
	if !got.Join || got.Proc != bootstrap.JoinerID || got.Rendezvous != want.Rendezvous || !bytes.Equal(got.Token, want.Token) || got.JobID != want.JobID {
		t.Fatalf("read back %+v, want a joiner of %+v", got, want)
	}
	if err := writeJoinEnv(filepath.Join(t.TempDir(), "no", "such", "dir", "f"), want); err == nil {
		t.Fatal("writeJoinEnv into a missing directory succeeded")
	}
}
