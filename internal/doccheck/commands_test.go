package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// external lists the commands of shell blocks that are not the
// repository's: system tools and shell builtins the documents use.
var external = []string{
	"apt-get", "cat", "cd", "curl", "docker", "echo", "env", "eval", "exec", "export", "go", "grep", "head",
	"kind", "kubectl", "mkdir", "printf", "salloc", "sbatch", "scontrol", "sh", "srun",
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

var (
	runFlag  = regexp.MustCompile(`-run[ =]('[^']*'|"[^"]*"|\S+)`)
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	testName = regexp.MustCompile(`^(Test|Benchmark|Fuzz|Example)\w*$`)
)

// runNames returns the test names a -run pattern of a go test command
// names: each alternative's first element, anchors removed, when it is a
// plain Test, Benchmark, Fuzz or Example name (X, XXX and '^$' select
// nothing on purpose and are left out).
func runNames(s string) []string {
	if !strings.Contains(s, "go test") {
		return nil
	}
	var out []string
	for _, m := range runFlag.FindAllStringSubmatch(s, -1) {
		for _, alt := range strings.Split(strings.Trim(m[1], `'"`), "|") {
			name, _, _ := strings.Cut(alt, "/")
			name = strings.TrimSuffix(strings.TrimPrefix(name, "^"), "$")
			if testName.MatchString(name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// TestNamedTestsExist fails when a go test -run of the documents names a
// test function no test file of the repository has (a prefix is enough:
// -run matches prefixes).
func TestNamedTestsExist(t *testing.T) {
	root := repoRoot(t)
	var funcs []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && path != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				funcs = append(funcs, string(m[1]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	known := func(name string) bool {
		return slices.ContainsFunc(funcs, func(f string) bool { return strings.HasPrefix(f, name) })
	}
	for _, d := range docs(t, root) {
		check := func(line int, s string) {
			for _, name := range runNames(s) {
				if !known(name) {
					t.Errorf("%s:%d: go test -run names %s, which no test file of the repository defines", d.name, line, name)
				}
			}
		}
		for _, s := range d.spans {
			check(s.line, s.text)
		}
		for _, f := range d.fences {
			for i, l := range f.lines {
				check(f.start+1+i, l)
			}
		}
	}
}

func TestRunNames(t *testing.T) {
	got := runNames(`go test ./test/chaos -run 'TestChaosHosts/seed=13$' -v; go test -run '^$' -fuzz X ./t; go test -run 'TestA|^TestB$' ./x; go test -run XXX -bench Kernel ./k`)
	if want := []string{"TestChaosHosts", "TestA", "TestB"}; !slices.Equal(got, want) {
		t.Errorf("runNames: got %q, want %q", got, want)
	}
}
