package proctest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestModuleRootPastNested: from inside a nested module (test/clustertier
// is one), ModuleRoot is the root module's directory, not the nested one's.
func TestModuleRootPastNested(t *testing.T) {
	root := t.TempDir()
	nested := filepath.Join(root, "test", "tier")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(root, "go.mod"):   "// the root\nmodule " + modulePath + "\n\ngo 1.26.0\n",
		filepath.Join(nested, "go.mod"): "module " + modulePath + "/test/tier\n\nreplace " + modulePath + " => ../..\n",
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(nested)
	got, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(root); got != root && got != want {
		t.Errorf("ModuleRoot from %s: got %s, want %s", nested, got, root)
	}
}
