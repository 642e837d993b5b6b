package proctest

import (
	"fmt"
	"io/fs"
	"path/filepath"
)

// LoosePerms walks every root (a directory or a file) and returns one line
// per entry whose mode has a group or other permission bit, such as
// "ckpt-3/rank-0.snap: -rw-r--r--". Every file a job writes is meant to be
// readable by its owner only. A root that does not exist is an error.
func LoosePerms(roots ...string) ([]string, error) {
	var loose []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if info.Mode().Perm()&0o077 != 0 {
				loose = append(loose, fmt.Sprintf("%s: %v", path, info.Mode()))
			}
			return nil
		})
		if err != nil {
			return loose, err
		}
	}
	return loose, nil
}
