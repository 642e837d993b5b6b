package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans"
)

// Rule: kmeans plot reads a --history CSV (events included) and writes a
// PNG or SVG; a file that is not a history is refused naming the line.
func TestPlotHistory(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "h.csv")
	os.WriteFile(good, []byte(kmeans.HistoryHeader+`
1,1,100,10,1,0.01,0.01,1,0,checkpoint:0
2,2,50,5,0.5,0.01,0.02,1,0,
3,1,100,10,1,0.01,0.05,2,1,failure:iteration 3: rank 2 failed;recovery:epoch 2: checkpoint of iteration 0 restored
4,2,50,5,0.5,0.01,0.06,2,1,
5,3,40,2,0.1,0.01,0.07,2,0,
`), 0o600)
	rows, err := readHistory(strings.NewReader(mustRead(t, good)), good)
	if err != nil || len(rows) != 5 || !rows[2].redo || len(rows[2].events) != 2 {
		t.Fatalf("readHistory = %+v, %v", rows, err)
	}
	for _, out := range []string{"h.png", "h.svg"} {
		if err := plotHistory(good, filepath.Join(dir, out), "t"); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte(kmeans.HistoryHeader+"\n1,x,3,4,5,6,7,8,9,\n"), 0o600)
	if err := plotHistory(bad, filepath.Join(dir, "b.png"), "t"); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
	if err := plotHistory(good, filepath.Join(dir, "b.gif"), "t"); err == nil || !strings.Contains(err.Error(), ".png or .svg") {
		t.Fatalf("gif: %v", err)
	}
	os.WriteFile(bad, []byte("a,b\n"), 0o600)
	if err := plotHistory(bad, filepath.Join(dir, "b.png"), "t"); err == nil || !strings.Contains(err.Error(), "header") {
		t.Fatalf("wrong header: %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
