package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeMaxLines is the README's budget: a front door, not the manual.
const readmeMaxLines = 200

// doc is one Markdown file, split into what the checks read.
type doc struct {
	name   string // path relative to the repository root
	lines  []string
	fences []fence
	// spans are the inline code spans outside fences and links their
	// link targets, each with the line it starts on.
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
