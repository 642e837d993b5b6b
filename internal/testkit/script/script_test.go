package script

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// upper echoes each command in capitals and refuses "stop".
type upper struct{ cmds []Cmd }

func (u *upper) Exec(out io.Writer, c Cmd) error {
	u.cmds = append(u.cmds, c)
	if c.Text == "stop" {
		return errors.New("stopped")
	}
	fmt.Fprintf(out, "  %s\n", strings.ToUpper(c.Text))
	return nil
}

func TestRunTrace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.script")
	if err := os.WriteFile(file, []byte("# a comment\n  one two \n\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := &upper{}
	got := Run(t, file, u)
	want := "# a comment\n> one two\n  ONE TWO\n\n> three\n  THREE\n"
	if got != want {
		t.Fatalf("trace:\n%s\nwant:\n%s", got, want)
	}
	if len(u.cmds) != 2 || u.cmds[0].Line != 2 || u.cmds[1].Line != 4 || u.cmds[1].File != file {
		t.Fatalf("commands %+v, want lines 2 and 4 of %s", u.cmds, file)
	}
}

func TestFirstDiff(t *testing.T) {
	if d := FirstDiff("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("equal traces: %q", d)
	}
	if d := FirstDiff("a\nb\n", "a\nc\n"); !strings.Contains(d, "line 2") || !strings.Contains(d, "want: b") || !strings.Contains(d, "got:  c") {
		t.Errorf("FirstDiff = %q", d)
	}
	if d := FirstDiff("a\n", "a\nb\n"); !strings.Contains(d, "line 2") {
		t.Errorf("a longer trace: %q", d)
	}
}
