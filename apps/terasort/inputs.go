package terasort

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Hidden reports whether a file of an input directory is left out, as
// Hadoop's input formats leave it out: names starting with "_" (the
// _SUCCESS marker, _logs) or "." (hidden files, editors' and Hadoop's
// .crc side files) and names ending in ".crc" (checksum side files).
func Hidden(name string) bool {
	return strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".crc")
}

// InputFiles returns the input files of dir: its regular files of any
// name but the Hidden ones (gensort's and Hadoop's outputs, files renamed
// by hand) and the part-NNNNN.tmp files a sort left, part-NNNNN files first in part order, then the others by
// name. When every file is a part file, their numbers must run 0, 1, 2,
// ... without a gap, as ListParts requires. It returns ErrNoInput when
// dir holds no input file.
func InputFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("terasort: %w", err)
	}
	var parts []partFile
	var others []string
	for _, e := range ents {
		name := e.Name()
		if Hidden(name) || !e.Type().IsRegular() {
			continue
		}
		if base, ok := strings.CutSuffix(name, ".tmp"); ok {
			if _, ok := parsePartName(base); ok {
				continue // a part a sort left unfinished
			}
		}
		if num, ok := parsePartName(name); ok {
			parts = append(parts, partFile{path: filepath.Join(dir, name), num: num})
			continue
		}
		others = append(others, filepath.Join(dir, name))
	}
	if len(others) == 0 {
		return ListParts(dir)
	}
	slices.SortFunc(parts, func(a, b partFile) int { return a.num - b.num })
	slices.Sort(others)
	out := make([]string, 0, len(parts)+len(others))
	for _, p := range parts {
		out = append(out, p.path)
	}
	return append(out, others...), nil
}
