package doccheck

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// notPaths lists words that look like paths of the repository but name
// something else.
var notPaths = map[string]string{
	"job/kmeans-ft": "a Kubernetes Job (kubectl wait ... job/kmeans-ft), not package job",
}

// repo is what the checks know of the repository's files.
type repo struct {
	root     string
	top      map[string]bool // entries of the root, but bin/ (build output)
	programs map[string]bool // base names of the directories of main packages
}

func scan(t *testing.T, root string) repo {
	t.Helper()
	r := repo{root: root, top: map[string]bool{}, programs: map[string]bool{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "bin" {
			r.top[e.Name()] = true
		}
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly)
		if err == nil && f.Name.Name == "main" {
			r.programs[filepath.Base(filepath.Dir(path))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.programs["gaspirun"] {
		t.Fatalf("found no main package cmd/gaspirun under %s: programs %v", root, r.programs)
	}
	return r
}

// exists reports whether rel (a path relative to the root, slashes) is
// in the repository.
func (r repo) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(rel)))
	return err == nil
}

// placeholder is a path component that stands for a name: NAME, DIR, N.
var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// goCommand finds a go command whose ./x arguments are package paths.
var goCommand = regexp.MustCompile(`\bgo (build|test|run|doc|vet|install|generate|list)\b`)

// pathTokens returns the words of s that name a path in the repository:
// x/y whose x is an entry of the root, or ./x in a go command (a package
// argument). It leaves out absolute paths, URLs, build output (bin/),
// placeholders (<x>, $X, a component in capitals: apps/NAME, DIR/rules)
// and notPaths.
func (r repo) pathTokens(s string) []string {
	var out []string
	for _, cmd := range commandSep.Split(s, -1) {
		out = append(out, r.cmdPathTokens(cmd, goCommand.MatchString(cmd))...)
	}
	return out
}

// cmdPathTokens is pathTokens for one command; goCmd says whether it is a
// go command, whose ./x arguments are package paths.
func (r repo) cmdPathTokens(s string, goCmd bool) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(c rune) bool {
		return unicode.IsSpace(c) || strings.ContainsRune("\"'`()[],;=|", c)
	}) {
		w = strings.TrimRight(w, ".:")
		if strings.ContainsAny(w, "<>*%$~{}") || strings.HasPrefix(w, "/") || strings.Contains(w, "://") {
			continue
		}
		dotSlash := strings.HasPrefix(w, "./")
		w = strings.TrimSuffix(strings.TrimPrefix(w, "./"), "/...")
		w = strings.TrimSuffix(w, "/")
		if w == "" || w == "." || w == "..." {
			continue
		}
		first, _, nested := strings.Cut(w, "/")
		if _, ok := notPaths[w]; ok || slices.ContainsFunc(strings.Split(w, "/"), placeholder.MatchString) {
			continue
		}
		if (dotSlash && goCmd) || (nested && r.top[first]) {
			out = append(out, w)
		}
	}
	return out
}

// slug is GitHub's anchor for a heading's text.
func slug(heading string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(c) || unicode.IsDigit(c) || c == '-' || c == '_':
			b.WriteRune(c)
		case c == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings.
func anchors(d doc) map[string]bool {
	in := d.inFence()
	seen := map[string]int{}
	out := map[string]bool{}
	for i, l := range d.lines {
		if in[i+1] || !strings.HasPrefix(l, "#") {
			continue
		}
		s := slug(strings.TrimLeft(l, "#"))
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestNamedPathsExist(t *testing.T) {
	root := repoRoot(t)
	r := scan(t, root)
	check := func(d doc, line int, rel, what string) {
		if r.exists(rel) {
			return
		}
		t.Errorf("%s:%d: %s %s does not exist in the repository", d.name, line, what, rel)
	}
	for _, d := range docs(t, root) {
		for _, s := range d.spans {
			for _, p := range r.pathTokens(s.text) {
				check(d, s.line, p, "path")
			}
		}
		for _, f := range d.fences {
			if f.lang == "go" {
				continue // Go code names import paths, not files; TestReadmeProgram compiles it
			}
			for i, l := range f.lines {
				for _, p := range r.pathTokens(stripComment(l)) {
					check(d, f.start+1+i, p, "path")
				}
			}
		}
		for _, l := range d.links {
			if strings.Contains(l.text, "://") || strings.HasPrefix(l.text, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(l.text, "#")
			rel := d.name
			if target != "" {
				rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(d.name), target)))
				if strings.HasPrefix(rel, "../") {
					t.Errorf("%s:%d: link %s leaves the repository", d.name, l.line, l.text)
					continue
				}
				check(d, l.line, rel, "link target")
			}
			if frag == "" || !strings.HasSuffix(rel, ".md") || !r.exists(rel) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(parse(rel, string(b)))[frag] {
				t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", d.name, l.line, l.text, rel, frag)
			}
		}
	}
}

func TestPathTokens(t *testing.T) {
	r := repo{top: map[string]bool{"apps": true, "cmd": true, "job": true, "docs": true}}
	got := r.pathTokens(`go test ./test/x/... -run A; gaspirun -- ./myprog; apps/NAME, DIR/rules, /etc/hosts, job/kmeans-ft, ` +
		`bin/kmeans, http://a/b, docs/x.md: and "cmd/gaspirun/doc.go"; <namespace>/y`)
	if want := []string{"test/x", "docs/x.md", "cmd/gaspirun/doc.go"}; !slices.Equal(got, want) {
		t.Errorf("pathTokens: got %q, want %q", got, want)
	}
}
