package main

import (
	"bytes"
	"os"
	"strings"

	"github.com/gaspigo/gaspigo/apps/kmeans"
)

// historyFile is --history's file, opened on the first line written:
// only the reporting rank writes (rank 0, or the lowest live rank after
// rank 0 was lost), so the other ranks never touch it. The process that
// starts as rank 0 truncates it; a rank that takes over appends and
// leaves out the header the file already has. On one machine, or a
// shared file system, the run's lines stay in one file.
type historyFile struct {
	path  string
	first bool // truncate: this process starts the run's history
	f     *os.File
}

func (h *historyFile) Write(p []byte) (int, error) {
	if h.f == nil {
		flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
		if h.first {
			flags |= os.O_TRUNC
		}
		f, err := os.OpenFile(h.path, flags, 0o600)
		if err != nil {
			return 0, err
		}
		h.f = f
		if st, err := f.Stat(); err == nil && st.Size() > 0 && bytes.Equal(bytes.TrimSpace(p), []byte(strings.TrimSpace(kmeans.HistoryHeader))) {
			return len(p), nil // the header is there already
		}
	}
	return h.f.Write(p)
}

func (h *historyFile) Close() error {
	if h.f == nil {
		return nil
	}
	return h.f.Close()
}
