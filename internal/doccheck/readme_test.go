package doccheck

import (
	"bufio"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadmeProgram holds the README's Go block to the body of Example,
// which go test compiles: the program shown cannot rot.
func TestReadmeProgram(t *testing.T) {
	root := repoRoot(t)
	d := docs(t, root)[0]
	var shown []string
	for _, f := range d.fences {
		if f.lang == "go" {
			if shown != nil {
				t.Fatalf("README.md has more than one go block (line %d): TestReadmeProgram compares one", f.start)
			}
			shown = f.lines
		}
	}
	if shown == nil {
		t.Fatal("README.md has no go block: the program under \"Writing a program\" is gone")
	}
	body, err := exampleBody(filepath.Join(root, "internal", "doccheck", "example_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shown, body) {
		for i := range max(len(shown), len(body)) {
			a, b := "", ""
			if i < len(shown) {
				a = shown[i]
			}
			if i < len(body) {
				b = body[i]
			}
			if a != b {
				t.Fatalf("README.md's go block differs from Example's body at its line %d:\nREADME:  %q\nExample: %q\n(copy the body of Example in internal/doccheck/example_test.go, one tab less, into the README)", i+1, a, b)
			}
		}
	}
}

// exampleBody returns the lines of Example's body, one tab less indented.
func exampleBody(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Example" || fn.Body == nil {
			continue
		}
		text := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		var lines []string
		sc := bufio.NewScanner(strings.NewReader(strings.Trim(text, "\n")))
		for sc.Scan() {
			lines = append(lines, strings.TrimPrefix(sc.Text(), "\t"))
		}
		return lines, sc.Err()
	}
	return nil, errors.New(path + ": no func Example")
}

// TestReadmeTestCommandIsCI holds the README's test command to the one
// .ci/run runs: a newcomer runs exactly what CI runs.
func TestReadmeTestCommandIsCI(t *testing.T) {
	root := repoRoot(t)
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for _, l := range strings.Split(string(ci), "\n") {
		if strings.HasPrefix(l, "go test ") {
			cmd = l
		}
	}
	if cmd == "" {
		t.Fatal(".ci/run has no line that starts with \"go test \"")
	}
	for _, f := range docs(t, root)[0].fences {
		if f.lang == "sh" && slices.Contains(f.lines, cmd) {
			return
		}
	}
	t.Errorf("README.md has no sh block with .ci/run's test command %q", cmd)
}
