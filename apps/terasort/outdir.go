package terasort

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gaspigo/gaspigo/internal/durable"
)

// The output directory of terasort sort holds one part file per rank and,
// once every part is durable, the marker SuccessName: a JSON manifest
// listing the parts with their record counts, and the total count and
// checksum. A directory without the marker, or with part files the marker
// does not list, is not a complete sort output (ReadSuccess refuses it).

// SuccessName is the marker file of a complete sort output.
const SuccessName = "_SUCCESS"

// successFormat names the marker's layout.
const successFormat = "terasort-sort-output/1"

// Success is the content of the marker.
type Success struct {
	Format   string        `json:"format"`
	Parts    []SuccessPart `json:"parts"`
	Records  int64         `json:"records"`
	Checksum string        `json:"checksum"` // 16 hex digits, as Summary prints it
}

// SuccessPart is one part file listed in the marker.
type SuccessPart struct {
	Name    string `json:"name"`
	Records int64  `json:"records"`
}

// Summary returns the total count and checksum the marker records.
func (s *Success) Summary() (Summary, error) {
	c, err := ParseChecksum(s.Checksum)
	if err != nil {
		return Summary{}, err
	}
	return Summary{Records: s.Records, Checksum: c}, nil
}

// WriteSuccess marks dir as a complete sort output of parts part files
// holding total: it lists dir's part files (part-00000 .. without a gap),
// checks that there are parts of them and that their sizes add up to
// total.Records, syncs every part, and writes the
// marker (owner-only) through a temporary file renamed into place, then
// syncs the directory. Call it once every part is in place.
func WriteSuccess(dir string, parts int, total Summary) error {
	paths, err := ListParts(dir)
	if err != nil {
		return err
	}
	if len(paths) != parts {
		return fmt.Errorf("%w: %s holds %d part files, the sort wrote %d; not marking the directory complete", ErrIncomplete, dir, len(paths), parts)
	}
	m := Success{Format: successFormat, Records: total.Records, Checksum: fmt.Sprintf("%016x", total.Checksum)}
	var sum int64
	for _, p := range paths {
		n, err := CheckFileSize(p)
		if err != nil {
			return err
		}
		if err := durable.Sync(p); err != nil {
			return fmt.Errorf("terasort: sync %s: %w", p, err)
		}
		m.Parts = append(m.Parts, SuccessPart{Name: filepath.Base(p), Records: n})
		sum += n
	}
	if sum != total.Records {
		return fmt.Errorf("%w: %s: the part files hold %d records, the sort %d; not marking the directory complete", ErrIncomplete, dir, sum, total.Records)
	}
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(dir, SuccessName, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("terasort: write %s: %w", filepath.Join(dir, SuccessName), err)
	}
	return nil
}

// ReadSuccess reads dir's marker and returns it with the paths of the
// parts it lists, in order. It returns ErrIncomplete when the marker is
// missing or unreadable, when a listed part is missing or has another
// size, and when dir holds a part file the marker does not list (a stale
// or foreign part).
func ReadSuccess(dir string) (*Success, []string, error) {
	bad := func(format string, args ...any) (*Success, []string, error) {
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrIncomplete, dir, fmt.Sprintf(format, args...))
	}
	data, err := os.ReadFile(filepath.Join(dir, SuccessName))
	if errors.Is(err, fs.ErrNotExist) {
		return bad("no %s marker: not the complete output of terasort sort (it failed, is still running, or did not write this directory); name the part files to check them anyway", SuccessName)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("terasort: %w", err)
	}
	var m Success
	if err := json.Unmarshal(data, &m); err != nil || m.Format != successFormat {
		return bad("%s is not a marker this program writes (want format %q)", SuccessName, successFormat)
	}
	if _, err := m.Summary(); err != nil {
		return bad("%s: checksum %q: %v", SuccessName, m.Checksum, err)
	}
	listed := map[string]bool{}
	var paths []string
	var sum int64
	for i, p := range m.Parts {
		if p.Name != PartName(i) {
			return bad("%s lists %q as part %d, want %s", SuccessName, p.Name, i, PartName(i))
		}
		path := filepath.Join(dir, p.Name)
		n, err := CheckFileSize(path)
		if err != nil {
			return bad("%s lists %s: %v", SuccessName, p.Name, err)
		}
		if n != p.Records {
			return bad("%s has %d records, its %s marker says %d", p.Name, n, SuccessName, p.Records)
		}
		listed[p.Name] = true
		paths = append(paths, path)
		sum += n
	}
	if len(paths) == 0 || sum != m.Records {
		return bad("%s lists %d parts of %d records in all, but says %d", SuccessName, len(paths), sum, m.Records)
	}
	pf, err := partFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pf {
		if name := filepath.Base(p.path); !listed[name] {
			return bad("it holds %s, which its %s marker does not list: a stale or foreign part; remove it, or sort again with --replace", name, SuccessName)
		}
	}
	return &m, paths, nil
}

// PlanOutput checks the output directory out of a sort reading in before
// the sort starts, and returns what to remove first. out must be neither
// in, nor inside it, nor contain it. A missing or empty out is fine.
// Otherwise, without replace it returns ErrOutputDir; with replace it
// returns the previous sort's output to remove (its marker first, then
// the parts the marker lists, leftover part-NNNNN.tmp files and spill
// directories kvshuffle-r*), and ErrOutputDir when out holds anything else,
// part files no marker lists included: replace removes only what a
// previous sort wrote.
func PlanOutput(out, in string, replace bool) ([]string, error) {
	if err := CheckOutputPath(out, in); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --out %s: %v", ErrOutputDir, out, err)
	}
	if len(ents) == 0 {
		return nil, nil
	}
	if !replace {
		names := make([]string, 0, 3)
		for _, e := range ents[:min(3, len(ents))] {
			names = append(names, e.Name())
		}
		more := ""
		if len(ents) > 3 {
			more = fmt.Sprintf(" and %d more", len(ents)-3)
		}
		return nil, fmt.Errorf("%w: --out %s is not empty (it holds %s%s): give a new or empty directory, or --replace to remove the output of a previous terasort sort there", ErrOutputDir, out, strings.Join(names, ", "), more)
	}
	listed := map[string]bool{}
	if m, _, err := ReadSuccess(out); err == nil {
		listed[SuccessName] = true
		for _, p := range m.Parts {
			listed[p.Name] = true
		}
	} else if _, serr := os.Stat(filepath.Join(out, SuccessName)); serr == nil {
		// A marker that does not match the directory: the parts it does
		// not describe cannot be told from foreign files.
		return nil, fmt.Errorf("%w: --out %s: %v; --replace removes only a previous sort's complete output: clean the directory yourself", ErrOutputDir, out, err)
	}
	var remove []string
	if listed[SuccessName] {
		remove = append(remove, filepath.Join(out, SuccessName)) // first: the directory stops looking complete
	}
	for _, e := range ents {
		name := e.Name()
		base, tmp := strings.CutSuffix(name, ".tmp")
		_, isPart := parsePartName(base)
		switch {
		case name == SuccessName:
		case listed[name] && !e.IsDir():
		case tmp && isPart && !e.IsDir(), name == SuccessName+".tmp":
		case e.IsDir() && strings.HasPrefix(name, "kvshuffle-r"):
		case isPart && !tmp:
			return nil, fmt.Errorf("%w: --out %s holds %s, which no %s marker lists (the input of a sort, or a part of a failed one?); --replace removes only a previous sort's complete output: remove it yourself or give another directory", ErrOutputDir, out, name, SuccessName)
		default:
			return nil, fmt.Errorf("%w: --out %s holds %s, which terasort sort does not write; --replace removes only a previous sort's output: remove it yourself or give another directory", ErrOutputDir, out, name)
		}
		if name != SuccessName {
			remove = append(remove, filepath.Join(out, name))
		}
	}
	return remove, nil
}

// RemoveOutput removes what PlanOutput returned, in order (a spill
// directory with its contents). Paths already gone are fine.
func RemoveOutput(paths []string) error {
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("terasort: --replace: %w", err)
		}
	}
	return nil
}

// CheckOutputPath refuses (ErrOutputDir) an output directory that is the
// input, lies inside the input directory or contains it (symbolic links
// resolved as far as the paths exist). It only looks at the paths.
func CheckOutputPath(out, in string) error {
	o, err := resolvePath(out)
	if err != nil {
		return fmt.Errorf("%w: --out %s: %v", ErrOutputDir, out, err)
	}
	i, err := resolvePath(in)
	if err != nil {
		return fmt.Errorf("%w: --in %s: %v", ErrOutputDir, in, err)
	}
	if st, err := os.Stat(in); err == nil && !st.IsDir() {
		// One input file: only the file itself is in the way.
		if o == i {
			return fmt.Errorf("%w: --out %s is the input file: give a directory", ErrOutputDir, out)
		}
		return nil
	}
	switch {
	case o == i:
		return fmt.Errorf("%w: --out %s is the input directory: give another directory", ErrOutputDir, out)
	case within(o, i):
		return fmt.Errorf("%w: --out %s is inside the input directory %s: give a directory outside it", ErrOutputDir, out, in)
	case within(i, o):
		return fmt.Errorf("%w: --out %s contains the input %s: give a directory outside it", ErrOutputDir, out, in)
	}
	return nil
}

// within reports whether path p lies strictly inside directory d.
func within(p, d string) bool {
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// resolvePath makes p absolute and resolves symbolic links in its longest
// existing prefix.
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	cur := abs
	for {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			slices.Reverse(rest)
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append(rest, filepath.Base(cur))
		cur = parent
	}
}
