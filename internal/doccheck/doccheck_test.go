package doccheck

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
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

// readmeMaxLines is the README's budget: a front door, not the manual.
const readmeMaxLines = 200

// pending lists paths the documents may name before they exist, because
// another branch adds them. An entry is checked like any path once the
// file is there; drop it then (the test logs that it can go).
var pending = map[string]string{
	"docs/design.md": "the design document, written on its own branch",
}

// notPaths lists words that look like paths of the repository but name
// something else.
var notPaths = map[string]string{
	"job/kmeans-ft": "a Kubernetes Job (kubectl wait ... job/kmeans-ft), not package job",
}

// external lists the commands of shell blocks that are not the
// repository's: system tools and shell builtins the documents use.
var external = []string{
	"apt-get", "cat", "curl", "docker", "echo", "eval", "exec", "export", "go", "grep", "head",
	"kind", "kubectl", "mkdir", "printf", "salloc", "sbatch", "scontrol", "sh", "srun",
}

// doc is one Markdown file, split into what the checks read.
type doc struct {
	name   string // path relative to the repository root
	lines  []string
	fences []fence
	// spans are the inline code spans and link targets outside fences,
	// with the line they are on.
	spans []span
	links []span
}

type fence struct {
	lang  string
	start int // line number of the opening ```
	lines []string
}

type span struct {
	line int
	text string
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	linkDest = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	delimRow = regexp.MustCompile(`^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$`)
)

// repoRoot is the module root: the first parent of the working directory
// that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// docs reads README.md, docs/*.md and bench/RESULTS.md, README.md first.
func docs(t *testing.T, root string) []doc {
	t.Helper()
	names := []string{"README.md", "bench/RESULTS.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		names = append(names, filepath.ToSlash(must(filepath.Rel(root, m))))
	}
	var ds []doc
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(root, n))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, parse(n, string(b)))
	}
	return ds
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// parse splits a Markdown text into fenced blocks, code spans and link
// targets. Lines are numbered from 1. Code spans may run over the lines of
// a paragraph, so spans and links are found per paragraph (a run of
// non-blank lines outside fences) and carry the line they start on.
func parse(name, text string) doc {
	d := doc{name: name, lines: strings.Split(strings.TrimSuffix(text, "\n"), "\n")}
	var cur *fence
	var para []string
	paraStart := 0
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(para, "\n")
		lineOf := func(off int) int { return paraStart + strings.Count(text[:off], "\n") }
		for _, m := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
			d.spans = append(d.spans, span{lineOf(m[0]), strings.ReplaceAll(text[m[2]:m[3]], "\n", " ")})
		}
		blanked := codeSpan.ReplaceAllStringFunc(text, func(s string) string {
			return strings.Map(func(r rune) rune {
				if r == '\n' {
					return r
				}
				return ' '
			}, s)
		})
		for _, m := range linkDest.FindAllStringSubmatchIndex(blanked, -1) {
			d.links = append(d.links, span{lineOf(m[0]), blanked[m[2]:m[3]]})
		}
		para = nil
	}
	for i, l := range d.lines {
		n := i + 1
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			flush()
			if cur == nil {
				cur = &fence{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), start: n}
			} else {
				d.fences = append(d.fences, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, l)
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "|") || strings.HasPrefix(trimmed, "#") {
			flush() // a table row or a heading is a block of its own
			if trimmed != "" {
				para, paraStart = []string{l}, n
				flush()
			}
			continue
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, l)
	}
	flush()
	if cur != nil {
		d.fences = append(d.fences, *cur) // unclosed: checked as far as it goes
	}
	return d
}

// inFence reports, per line number, whether the line is inside a fence
// (or is one of its markers).
func (d doc) inFence() []bool {
	in := make([]bool, len(d.lines)+2)
	for _, f := range d.fences {
		for n := f.start; n <= f.start+len(f.lines)+1 && n < len(in); n++ {
			in[n] = true
		}
	}
	return in
}

// tableErrors returns one message per run of table rows that does not
// start with a header and a delimiter row.
func tableErrors(d doc) []string {
	var errs []string
	in := d.inFence()
	prevEnd := 0 // last line of the previous table
	for i := 0; i < len(d.lines); i++ {
		n := i + 1
		if in[n] || !strings.HasPrefix(strings.TrimSpace(d.lines[i]), "|") {
			continue
		}
		start := i
		for i < len(d.lines) && !in[i+1] && strings.HasPrefix(strings.TrimSpace(d.lines[i]), "|") {
			i++
		}
		rows := d.lines[start:i]
		if len(rows) < 2 || !delimRow.MatchString(strings.TrimSpace(rows[1])) {
			msg := fmt.Sprintf("%s:%d: table rows without a header and delimiter row", d.name, start+1)
			if prevEnd > 0 && prevEnd >= start-2 && start > 0 && strings.TrimSpace(d.lines[start-1]) == "" {
				msg += fmt.Sprintf(": the blank line %d splits the table that ends at line %d", start, prevEnd)
			}
			errs = append(errs, msg)
		}
		prevEnd = i
	}
	return errs
}

func TestTablesHaveNoBlankLine(t *testing.T) {
	for _, d := range docs(t, repoRoot(t)) {
		for _, e := range tableErrors(d) {
			t.Error(e)
		}
	}
}

func TestTableCheckFindsSplit(t *testing.T) {
	split := parse("x.md", "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n")
	errs := tableErrors(split)
	if len(errs) != 1 || !strings.Contains(errs[0], "x.md:5:") || !strings.Contains(errs[0], "blank line 4") {
		t.Errorf("split table: got %q, want one error at line 5 naming the blank line 4", errs)
	}
	whole := parse("y.md", "| a | b |\n|:--|--:|\n| 1 | 2 |\n\ntext\n\n| c |\n| --- |\n```\n| not a table\n```\n")
	if errs := tableErrors(whole); len(errs) != 0 {
		t.Errorf("two whole tables and a fenced pipe: got %q, want none", errs)
	}
}

func TestSpansAcrossLines(t *testing.T) {
	d := parse("z.md", "text `go test\n./pkg/x` and [a](b.md#c)\nmore `one`\n\n| `t/u` |\n")
	var got []string
	for _, s := range d.spans {
		got = append(got, fmt.Sprintf("%d:%s", s.line, s.text))
	}
	if want := []string{"1:go test ./pkg/x", "3:one", "5:t/u"}; !slices.Equal(got, want) {
		t.Errorf("spans: got %q, want %q", got, want)
	}
	if len(d.links) != 1 || d.links[0] != (span{2, "b.md#c"}) {
		t.Errorf("links: got %v, want [{2 b.md#c}]", d.links)
	}
}

func TestReadmeLength(t *testing.T) {
	d := docs(t, repoRoot(t))[0]
	if len(d.lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to docs/", len(d.lines), readmeMaxLines)
	}
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

// goCommand finds a go command whose ./x arguments are package paths.
var goCommand = regexp.MustCompile(`\bgo (build|test|run|doc|vet|install|generate|list)\b`)

// pathTokens returns the words of s that name a path in the repository:
// x/y whose x is an entry of the root, or ./x in a go command (a package
// argument). It leaves out absolute paths, URLs, build output (bin/),
// placeholders and notPaths.
func (r repo) pathTokens(s string) []string {
	goCmd := goCommand.MatchString(s)
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
		if _, ok := notPaths[w]; ok {
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
			if why, ok := pending[rel]; ok {
				t.Logf("%s exists now (%s): drop it from pending", rel, why)
			}
			return
		}
		if _, ok := pending[rel]; ok {
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

// stripComment removes a shell comment: from a # at the start of the
// line or after a blank, outside quotes.
func stripComment(l string) string {
	var quote rune
	for i, c := range l {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

var (
	singleQuoted = regexp.MustCompile(`'[^']*'`)
	arithmetic   = regexp.MustCompile(`\$\(\([^)]*\)\)`)
	commandSep   = regexp.MustCompile(`&&|\|\||\$\(|[|;]`)
	assignment   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	binProgram   = regexp.MustCompile(`(?:^|[\s=(])bin/([A-Za-z0-9_.-]+)`)
)

// commands returns the command words of a shell block's lines: the first
// word of every command of every logical line (continuations joined), with
// variable assignments before it skipped.
func commands(lines []string) []span {
	var out []span
	logical, first := "", 0
	for i, l := range lines {
		if logical == "" {
			first = i
		}
		l = stripComment(l)
		if strings.HasSuffix(strings.TrimSpace(l), `\`) {
			logical += strings.TrimSuffix(strings.TrimSpace(l), `\`) + " "
			continue
		}
		logical += l
		s := arithmetic.ReplaceAllString(singleQuoted.ReplaceAllString(logical, "''"), "0")
		for _, part := range commandSep.Split(s, -1) {
			for _, w := range strings.Fields(part) {
				w = strings.Trim(w, `"()`)
				if w == "" || assignment.MatchString(w) {
					continue
				}
				out = append(out, span{first, w})
				break
			}
		}
		logical = ""
	}
	return out
}

func TestShownCommandsExist(t *testing.T) {
	root := repoRoot(t)
	r := scan(t, root)
	for _, d := range docs(t, root) {
		for _, f := range d.fences {
			if f.lang != "sh" && f.lang != "bash" && f.lang != "shell" {
				continue
			}
			for _, c := range commands(f.lines) {
				line := f.start + 1 + c.line
				switch name, isBin := strings.CutPrefix(c.text, "bin/"); {
				case isBin:
					if !r.programs[name] {
						t.Errorf("%s:%d: bin/%s is no program of the repository (no main package named %s)", d.name, line, name, name)
					}
				case strings.Contains(c.text, "/"):
					if !r.exists(strings.TrimPrefix(c.text, "./")) {
						t.Errorf("%s:%d: command %s is no file of the repository", d.name, line, c.text)
					}
				case !r.programs[c.text] && !slices.Contains(external, c.text):
					t.Errorf("%s:%d: command %s is neither a program of the repository nor a system tool the test knows (its list external)", d.name, line, c.text)
				}
			}
			// bin/NAME run by another command (gaspirun -- bin/kmeans, salloc bin/gaspirun).
			for i, l := range f.lines {
				for _, m := range binProgram.FindAllStringSubmatch(stripComment(l), -1) {
					if !r.programs[m[1]] {
						t.Errorf("%s:%d: bin/%s is no program of the repository", d.name, f.start+1+i, m[1])
					}
				}
			}
		}
		for _, s := range d.spans {
			for _, m := range binProgram.FindAllStringSubmatch(s.text, -1) {
				if !r.programs[m[1]] {
					t.Errorf("%s:%d: bin/%s is no program of the repository", d.name, s.line, m[1])
				}
			}
		}
	}
}

func TestCommandParsing(t *testing.T) {
	got := commands([]string{
		`go build -o bin/ ./cmd/gaspirun && bin/gaspirun -n 4 -- bin/kmeans # a comment`,
		`export PGAS_TOKEN=$(bin/gaspirun --new-token) PGAS_SPARES=2`,
		`mkdir /sys/x && echo $((250<<20)) > /sys/x/limit`,
		`sh -c 'echo $$ > f && exec "$@"' sh \`,
		`  bin/gaspirun -n 3 -- bin/wordcount run | grep words`,
		`X=1 deploy/slurm/local-cluster.sh up`,
	})
	var words []string
	for _, c := range got {
		words = append(words, c.text)
	}
	want := []string{"go", "bin/gaspirun", "export", "bin/gaspirun", "mkdir", "echo", "sh", "grep", "deploy/slurm/local-cluster.sh"}
	if !slices.Equal(words, want) {
		t.Errorf("commands: got %q, want %q", words, want)
	}
}

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
