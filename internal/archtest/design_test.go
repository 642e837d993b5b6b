package archtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The design document lives in the repository, and code that cites it
// must cite sections it has: docs/design.md §1 says so.

// designDoc is the design document's path inside the module.
const designDoc = "docs/design.md"

var (
	// sectionHead matches a numbered heading of the design: "## 4. Title"
	// or "### 4.2 Title".
	sectionHead = regexp.MustCompile(`(?m)^(?:## (\d+)\.|### (\d+\.\d+)) `)
	// citation matches a citation of the design with its section numbers:
	// "docs/design.md §6", "docs/design.md §6.2 and §12".
	citation   = regexp.MustCompile(`docs/design\.md((?:(?:\s|,|and|or)*§\d+(?:\.\d+)?)+)`)
	sectionNum = regexp.MustCompile(`§(\d+(?:\.\d+)?)`)
	// staleDesign matches a reference to a design file other than the
	// one in the repository (a DESIGN.md, or "DESIGN §n").
	staleDesign = regexp.MustCompile(`\bDESIGN(?:\.md)?\b`)
)

// sections returns the section numbers a design document has ("4",
// "4.2"), and an error when its top-level sections are not numbered 1, 2,
// 3, ... in order.
func sections(doc string) (map[string]bool, error) {
	have := make(map[string]bool)
	next := 1
	for _, m := range sectionHead.FindAllStringSubmatch(doc, -1) {
		if m[1] != "" {
			if m[1] != fmt.Sprint(next) {
				return nil, fmt.Errorf("%s: section %s follows section %d: number them 1, 2, 3, ... in order", designDoc, m[1], next-1)
			}
			next++
			have[m[1]] = true
			continue
		}
		top, _, _ := strings.Cut(m[2], ".")
		if !have[top] || top != fmt.Sprint(next-1) {
			return nil, fmt.Errorf("%s: subsection %s is not inside section %s", designDoc, m[2], top)
		}
		have[m[2]] = true
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("%s has no numbered sections (\"## 1. Title\")", designDoc)
	}
	return have, nil
}

// citations returns one message per citation in src (a file's text, path
// its name for the messages) of a section that have lacks, and per
// reference to a design file that is not in the repository.
func citations(path, src string, have map[string]bool) []string {
	var errs []string
	line := func(off int) int { return strings.Count(src[:off], "\n") + 1 }
	for _, m := range citation.FindAllStringSubmatchIndex(src, -1) {
		for _, n := range sectionNum.FindAllStringSubmatch(src[m[2]:m[3]], -1) {
			if !have[n[1]] {
				errs = append(errs, fmt.Sprintf("%s:%d cites %s §%s, which has no such section", path, line(m[0]), designDoc, n[1]))
			}
		}
	}
	for _, m := range staleDesign.FindAllStringIndex(src, -1) {
		errs = append(errs, fmt.Sprintf("%s:%d cites %q, which is not in the repository: cite %s §N", path, line(m[0]), src[m[0]:m[1]], designDoc))
	}
	return errs
}

// moduleRoot is the module's directory, found from this file's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot tell where this test file is")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// TestDesignCitations fails when a .go file of the module cites a section
// that docs/design.md does not have, or a design file that is not in the
// repository.
func TestDesignCitations(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, designDoc))
	if err != nil {
		t.Fatalf("the design document: %v", err)
	}
	have, err := sections(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join("internal", "archtest", "design_test.go") // its examples cite on purpose
	cited := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(path, ".go") || rel == self {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cited += len(citation.FindAllStringIndex(string(src), -1))
		for _, e := range citations(filepath.ToSlash(rel), string(src), have) {
			t.Error(e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited == 0 {
		t.Errorf("no .go file cites %s: the walk from %s found nothing to check", designDoc, root)
	}
}

// TestCitationsFindsBadReferences: the checker names every kind of bad
// reference, and passes good ones.
func TestCitationsFindsBadReferences(t *testing.T) {
	doc := "# D\n\n## 1. One\n\n### 1.1 Sub\n\n## 2. Two\n\ntext\n\n## 3. Three\n"
	have, err := sections(doc)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, src string
		want      []string // substrings, one per expected message
	}{
		{"good", "// see docs/design.md §2 and §1.1, docs/design.md §3", nil},
		{"a mention without a section", "// the design (docs/design.md) says", nil},
		{"no such section", "// see docs/design.md §14", []string{"x.go:1 cites docs/design.md §14"}},
		{"no such subsection", "\n// docs/design.md §2.3", []string{"x.go:2 cites docs/design.md §2.3"}},
		{"the second of two", "// docs/design.md §1, §9", []string{"§9, which has no such section"}},
		{"an old design file", "// DESIGN.md §2", []string{`cites "DESIGN.md", which is not in the repository`}},
		{"an old design file without its extension", `msg := "(DESIGN §9)"`, []string{`cites "DESIGN"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := citations("x.go", c.src, have)
			if len(errs) != len(c.want) {
				t.Fatalf("errors %q, want %d", errs, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(errs[i], w) {
					t.Errorf("error %q, want one containing %q", errs[i], w)
				}
			}
		})
	}
	for _, bad := range []string{"## 1. A\n## 3. C\n", "## 1. A\n### 2.1 B\n", "no sections\n"} {
		if _, err := sections(bad); err == nil {
			t.Errorf("sections(%q) accepted a badly numbered document", bad)
		}
	}
}

// TestDesignLayerTable fails when the layer table of docs/design.md §1
// differs from the layers the import-graph test enforces: the same
// patterns in the same order (the first match wins), each with the same
// set of allowed imports.
func TestDesignLayerTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), designDoc))
	if err != nil {
		t.Fatalf("the design document: %v", err)
	}
	got, err := docLayers(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	var want []layer
	for _, l := range layers {
		want = append(want, layer{from: l.from, allow: sorted(l.allow)})
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("%s §1 lacks the row of %s (row %d of the layers table)", designDoc, want[i].from, i+1)
		case i >= len(want):
			t.Errorf("%s §1 has a row for %s that the layers table does not", designDoc, got[i].from)
		case got[i].from != want[i].from:
			t.Errorf("%s §1 row %d is %s, the layers table's is %s", designDoc, i+1, got[i].from, want[i].from)
		case !slices.Equal(got[i].allow, want[i].allow):
			t.Errorf("%s §1: %s may import %v there, %v in the layers table", designDoc, got[i].from, got[i].allow, want[i].allow)
		}
	}
}

// docLayers reads the layer table between the markers of the design
// document: one row per layer, "| `from` | `a`, `b`, the libraries |".
func docLayers(doc string) ([]layer, error) {
	_, rest, ok := strings.Cut(doc, "<!-- layers: begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- layers: end -->")
	if !ok || !ok2 {
		return nil, fmt.Errorf("%s: no layer table between <!-- layers: begin --> and <!-- layers: end -->", designDoc)
	}
	var out []layer
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
		if len(cells) < 2 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue // the header, its rule, blank lines
		}
		l := layer{from: strings.Trim(strings.TrimSpace(cells[0]), "`")}
		for _, a := range strings.Split(cells[1], ",") {
			switch a = strings.TrimSpace(a); {
			case a == "nothing of the project":
			case a == "the libraries":
				l.allow = append(l.allow, libraries...)
			case strings.HasPrefix(a, "`") && strings.HasSuffix(a, "`"):
				l.allow = append(l.allow, strings.Trim(a, "`"))
			default:
				return nil, fmt.Errorf("%s: layer %s: cannot read %q (write `pattern`, the libraries, or nothing of the project)", designDoc, l.from, a)
			}
		}
		l.allow = sorted(l.allow)
		out = append(out, l)
	}
	return out, nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
