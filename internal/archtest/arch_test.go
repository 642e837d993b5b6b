package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// layer says which packages of the module the packages matching from may
// import, in their non-test files. Patterns are paths inside the module:
// "x" is x itself, "x/..." is x and every package below it, and "~/..."
// is the importer's own subtree (apps/NAME, cmd/NAME, test/NAME,
// bench/NAME). The first layer whose from matches a package is its layer;
// a package no layer matches fails the test, so a new package gets a rule.
type layer struct {
	from  string
	allow []string
	rule  string // the direction of docs/design.md §1 the layer encodes
}

// libraries are the packages programs are built from.
var libraries = []string{"obs", "segments", "transport", "transport/...", "health", "pgas", "spares", "ckpt", "kvshuffle", "job"}

// layers encodes docs/design.md §1.1 ("The import graph", whose table
// TestDesignLayerTable holds equal to this one).
var layers = []layer{
	{"segments", nil, "segments is a leaf: no project imports"},
	{"obs", nil, "obs (metrics and trace buffer) is a leaf: every layer records into it"},
	{"transport", nil, "transport (Rank, frames, the Transport seam) imports nothing of the project"},
	{"transport/...", []string{"transport", "transport/...", "internal/admit", "internal/auth", "internal/listen", "internal/tcpopt"},
		"transport implementations -> transport (and the admission gate, job token and socket options of their connections)"},
	{"health", []string{"transport"}, "health -> transport"},
	{"pgas", []string{"pgas/internal/...", "segments", "transport", "health", "obs"},
		"pgas -> its same-host plane, segments, transport, health (+ obs): no transport implementation, nothing under the module's internal/"},
	{"pgas/internal/...", []string{"segments", "transport"},
		"pgas/internal (the same-host data plane) -> segments, transport: never pgas, which it serves"},
	{"spares", []string{"spares/internal/...", "pgas", "health", "transport", "segments", "obs", "internal/admit", "internal/auth", "internal/listen", "internal/tcpopt", "internal/bootstrap", "internal/netfault"},
		"spares -> its dissemination tree, pgas, health (+ internal helpers); ckpt and spares never import each other"},
	{"spares/internal/follow", []string{"spares/internal/tree", "spares/internal/wire"},
		"spares/internal/follow (the tree's network side) -> the tree's pure part and the strict reader: never spares, which it serves through an interface"},
	{"spares/internal/...", nil, "spares/internal (the pure part of the dissemination tree, the strict msgpack reader) imports nothing of the project: never spares, which it serves"},
	{"ckpt", []string{"pgas", "segments", "obs", "internal/durable"},
		"ckpt -> pgas, segments (+ internal/durable); ckpt and spares never import each other"},
	{"kvshuffle", []string{"pgas", "ckpt", "health", "segments", "obs", "internal/directio"}, "kvshuffle -> pgas, ckpt, health, segments (+ internal/directio)"},
	{"job", []string{"pgas", "spares", "health", "transport", "transport/...", "segments", "obs", "internal/bootstrap", "internal/netfault", "internal/faultpoint", "internal/admit", "internal/auth", "internal/metrics"},
		"job, the composition root -> spares -> pgas: it wires what the layers below are given"},
	{"pgas/pgastest", []string{"pgas", "transport", "transport/...", "health", "segments"},
		"pgas/pgastest (test doubles for pgas's seams) -> pgas and the layers below it"},
	{"apps/internal/...", append([]string{"apps/internal/recovery", "apps/internal/inject", "apps/internal/cli", "internal/buildinfo"}, libraries...),
		"apps/internal helpers (the recovery loop, the failure injection, the command line, the key-value programs' frame on them) -> the libraries above, the recovery loop, the injection and the command line (which names the build for --version)"},
	{"apps/kmeans/kernel", nil, "apps/kmeans/kernel (K-means's numeric core) imports nothing of the project: never the point files or the job above it"},
	{"apps/kmeans/points", []string{"apps/kmeans/kernel"}, "apps/kmeans/points (K-means's point files) -> apps/kmeans/kernel (its errors and bounds): never the job above it"},
	{"apps/...", append([]string{"~/...", "apps/internal/...", "internal/durable", "internal/directio"}, libraries...), "apps -> the libraries above and apps/internal"},
	{"cmd/...", append([]string{"~/...", "internal/..."}, libraries...), "commands -> libraries and internal helpers, their own subpackages"},
	{"bench/...", append([]string{"~/...", "bench/internal/...", "internal/...", "apps/..."}, libraries...),
		"benchmarks -> libraries, apps (measured as black boxes), internal helpers"},
	{"test/...", append([]string{"~/...", "internal/...", "apps/..."}, libraries...),
		"test tiers -> libraries, apps and internal helpers, their own test programs"},
	{"internal/metrics", []string{"obs", "internal/..."}, "the metrics exporter and trace writer -> obs, the leaf it exports"},
	{"internal/...", []string{"internal/..."}, "internal helpers sit below the libraries: they import other helpers only"},
}

// closed lists subtrees that only some importers may import, in test files
// too (but for an entry with tests set): programs and tiers are not
// libraries, and the test kit is no part of the runtime.
var closed = []struct {
	tree   string   // pattern of the packages guarded
	except string   // pattern of packages under tree that the entry does not guard
	allow  []string // importers allowed besides the package's own subtree
	tests  bool     // any package's test files may import the tree
	rule   string
}{
	{"cmd/...", "", nil, false, "nothing imports cmd/ packages but their own subpackages"},
	{"test/...", "", nil, false, "nothing imports test/ packages but their own subpackages"},
	{"apps/...", "apps/internal/...", []string{"bench/...", "test/..."}, false, "nothing imports apps/ packages but their own subpackages, benchmarks and test tiers"},
	{"apps/internal/...", "", []string{"apps/...", "bench/...", "test/..."}, false, "only the apps (and benchmarks and tiers) import apps/internal"},
	{"internal/testkit/...", "", []string{"internal/testkit/...", "bench/...", "test/..."}, true,
		"the test kit is imported by test files, test tiers, benchmarks and itself only: no runtime part or command uses it"},
}

// pkg is one package of the module and its imports inside the module,
// paths relative to the module.
type pkg struct {
	path  string
	deps  []string // non-test files
	tdeps []string // test files (internal and external)
}

// match reports whether path matches pattern, self being the importer's
// own subtree for "~/...".
func match(pattern, path, self string) bool {
	if rest, ok := strings.CutPrefix(pattern, "~"); ok {
		if self == "" {
			return false
		}
		pattern = self + rest
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// subtree is the own subtree of a package under apps/, cmd/, test/ or
// bench/ (the first two elements of its path), "" for others.
func subtree(path string) string {
	parts := strings.SplitN(path, "/", 3)
	if len(parts) < 2 {
		return ""
	}
	switch parts[0] {
	case "apps", "cmd", "test", "bench":
		return parts[0] + "/" + parts[1]
	}
	return ""
}

// check returns one message per edge of pkgs that the rules forbid, and
// per package no layer covers.
func check(pkgs []pkg) []string {
	var errs []string
	for _, p := range pkgs {
		self := subtree(p.path)
		i := slices.IndexFunc(layers, func(l layer) bool { return match(l.from, p.path, "") })
		if i < 0 {
			errs = append(errs, fmt.Sprintf("package %s has no layer: add a rule for it to the table in internal/archtest (docs/design.md §1)", p.path))
		} else {
			l := layers[i]
			for _, d := range p.deps {
				if !slices.ContainsFunc(l.allow, func(a string) bool { return match(a, d, self) }) {
					errs = append(errs, fmt.Sprintf("forbidden import %s -> %s: rule %q allows %s (docs/design.md §1)",
						p.path, d, l.rule, allowed(l.allow)))
				}
			}
		}
		for i, d := range append(slices.Clone(p.deps), p.tdeps...) {
			for _, c := range closed {
				if !match(c.tree, d, "") || (c.except != "" && match(c.except, d, "")) || (subtree(d) != "" && subtree(d) == self) {
					continue
				}
				if c.tests && i >= len(p.deps) {
					continue // a test file's import
				}
				if !slices.ContainsFunc(c.allow, func(a string) bool { return match(a, p.path, "") }) {
					errs = append(errs, fmt.Sprintf("forbidden import %s -> %s: rule %q (docs/design.md §1)", p.path, d, c.rule))
				}
			}
		}
	}
	return errs
}

func allowed(a []string) string {
	if len(a) == 0 {
		return "no project package"
	}
	return strings.Join(a, ", ")
}

// goList lists every package of the module with its imports inside it.
func goList(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	mod, err := exec.Command(goBin, "list", "-m", "-f", "{{.Path}}\t{{.Dir}}").Output()
	if err != nil {
		t.Skipf("needs the go command to list the module: %v", err)
	}
	modPath, modDir, _ := strings.Cut(strings.TrimSpace(string(mod)), "\t")
	cmd := exec.Command(goBin, "list", "-e", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Dir = modDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./... in %s: %v\n%s", modDir, err, stderr.String())
	}
	inModule := func(list string) []string {
		var ds []string
		for _, f := range strings.Fields(list) {
			if rel, ok := strings.CutPrefix(f, modPath+"/"); ok {
				ds = append(ds, rel)
			}
		}
		return ds
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", sc.Text())
		}
		path, ok := strings.CutPrefix(f[0], modPath+"/")
		if !ok {
			continue // the module root, if it ever has a package
		}
		pkgs = append(pkgs, pkg{path: path, deps: inModule(f[1]), tdeps: inModule(f[2])})
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages in %s: %q", len(pkgs), modDir, out)
	}
	return pkgs
}

// TestImportGraph fails on any import in the module that docs/design.md §1
// does not allow.
func TestImportGraph(t *testing.T) {
	pkgs := goList(t)
	for _, e := range check(pkgs) {
		t.Error(e)
	}
	// Guard against a vacuous pass: the packages the rules are about exist.
	for _, want := range []string{"segments", "transport", "health", "pgas", "spares", "ckpt", "kvshuffle", "job"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.path == want }) {
			t.Errorf("package %s not found by go list", want)
		}
	}
}

// TestCheckFindsForbiddenEdges: the checker names the edge and the rule
// for every kind of violation.
func TestCheckFindsForbiddenEdges(t *testing.T) {
	cases := []struct {
		name string
		pkg  pkg
		want string // "" for no error
	}{
		{"allowed", pkg{path: "pgas", deps: []string{"segments", "transport", "health"}}, ""},
		{"health imports pgas", pkg{path: "health", deps: []string{"pgas"}},
			`forbidden import health -> pgas: rule "health -> transport" allows transport (docs/design.md §1)`},
		{"segments is a leaf", pkg{path: "segments", deps: []string{"transport"}}, "forbidden import segments -> transport"},
		{"pgas imports a transport implementation", pkg{path: "pgas", deps: []string{"transport/tcp"}}, "forbidden import pgas -> transport/tcp"},
		{"pgas imports internal", pkg{path: "pgas", deps: []string{"internal/bootstrap"}}, "forbidden import pgas -> internal/bootstrap"},
		{"ckpt imports spares", pkg{path: "ckpt", deps: []string{"spares"}}, "forbidden import ckpt -> spares"},
		{"spares imports ckpt", pkg{path: "spares", deps: []string{"ckpt"}}, "forbidden import spares -> ckpt"},
		{"spares imports job", pkg{path: "spares", deps: []string{"job"}}, "forbidden import spares -> job"},
		{"spares' tree imports spares", pkg{path: "spares/internal/tree", deps: []string{"spares"}}, "forbidden import spares/internal/tree -> spares"},
		{"the tree's network side imports spares", pkg{path: "spares/internal/follow", deps: []string{"spares/internal/tree", "spares"}}, "forbidden import spares/internal/follow -> spares"},
		{"an app imports another app", pkg{path: "apps/terasort", deps: []string{"apps/kmeans"}}, "forbidden import apps/terasort -> apps/kmeans"},
		{"an app's command imports its app", pkg{path: "apps/kmeans/cmd/kmeans", deps: []string{"apps/kmeans", "job"}}, ""},
		{"a library imports a command", pkg{path: "ckpt", tdeps: []string{"cmd/gaspirun/internal/launch"}}, `rule "nothing imports cmd/ packages but their own subpackages"`},
		{"a test program is imported", pkg{path: "test/kmtier", tdeps: []string{"test/fttier/testprog/ftstep"}}, `rule "nothing imports test/ packages but their own subpackages"`},
		{"a tier imports another tier", pkg{path: "test/kmtier", tdeps: []string{"test/tcptier/testprog/semantics"}}, "forbidden import test/kmtier -> test/tcptier/testprog/semantics"},
		{"a tier imports its own program", pkg{path: "test/tcptier", tdeps: []string{"test/tcptier/testprog/semantics"}}, ""},
		{"a runtime part imports the test kit", pkg{path: "internal/bootstrap", deps: []string{"internal/testkit/proctest"}}, `forbidden import internal/bootstrap -> internal/testkit/proctest: rule "the test kit`},
		{"a command imports the test kit", pkg{path: "cmd/gaspirun", deps: []string{"internal/testkit/simhost"}}, "forbidden import cmd/gaspirun -> internal/testkit/simhost"},
		{"a library's test imports the test kit", pkg{path: "ckpt", tdeps: []string{"internal/testkit/script"}}, ""},
		{"a tier and a benchmark import the test kit", pkg{path: "test/mhtier", deps: []string{"internal/testkit/mhjob"}, tdeps: []string{"internal/testkit/proctest"}}, ""},
		{"no layer", pkg{path: "newpkg"}, "package newpkg has no layer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := check([]pkg{c.pkg})
			switch {
			case c.want == "" && len(errs) > 0:
				t.Fatalf("unexpected errors: %q", errs)
			case c.want != "" && !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, c.want) }):
				t.Fatalf("errors %q, want one containing %q", errs, c.want)
			}
		})
	}
}
