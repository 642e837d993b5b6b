package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// writeJoinEnv writes env's variables to path (--join-env), owner-only
// and whole: to a temporary file beside it, renamed into place, so that
// a reader never sees half of it.
func writeJoinEnv(path string, env bootstrap.Env) error {
	var b strings.Builder
	for _, kv := range env.Environ() {
		b.WriteString(kv)
		b.WriteByte('\n')
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".join-env-*")
	if err != nil {
		return fmt.Errorf("%w: --join-env %s: %v; give a path in a directory you can write", ErrStart, path, err)
	}
	_, werr := tmp.WriteString(b.String())
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%w: --join-env %s: %v", ErrStart, path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%w: --join-env %s: %v", ErrStart, path, err)
	}
	return nil
}
