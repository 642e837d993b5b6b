package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/kmeans"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
)

// injects are the --inject flags: kills, and the chaos suite's store
// injections (store:...).
type injects struct {
	kills  []kmeans.Inject
	stores []kmeans.Store
}

func (i *injects) String() string { return fmt.Sprint(i.kills, i.stores) }
func (i *injects) Set(s string) error {
	if strings.HasPrefix(s, "store:") {
		st, err := kmeans.ParseStore(s)
		if err != nil {
			return err
		}
		i.stores = append(i.stores, st)
		return nil
	}
	in, err := kmeans.ParseInject(s)
	if err != nil {
		return err
	}
	i.kills = append(i.kills, in)
	return nil
}

type flags struct {
	opt       kmeans.Options
	generate  int
	output    string
	impl      string
	algo      string
	seeding   string
	mirrors   int
	ckptDir   string
	shrink    bool
	quiet     bool
	stamps    bool
	history   string
	skip      int
	sep       string
	boundsMem string
}

// parse reads the command line; its errors are usage errors (cli.Usage),
// and --help prints the flags on stdout (flag.ErrHelp).
func parse(args []string, stdout io.Writer) (*flags, error) {
	f, err := parseFlags(args, stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) && !cli.IsUsage(err) {
		err = cli.Usage("%v", err)
	}
	return f, err
}

func parseFlags(args []string, stdout io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("kmeans", flag.ContinueOnError)
	g := kernel.DefaultGenConfig()
	var inj injects
	f.define(fs, &g, &inj)
	pos, err := cli.Parse(fs, args, stdout)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, fmt.Errorf("unexpected argument %q: flags only", pos[0])
	}
	if err := f.checkValues(g); err != nil {
		return nil, err
	}
	if err := f.checkInjects(inj); err != nil {
		return nil, err
	}
	if err := f.resolve(fs); err != nil {
		return nil, err
	}
	g.N = f.generate
	f.opt.Gen = g
	f.opt.Seed = g.Seed
	f.opt.Injects, f.opt.Stores = inj.kills, inj.stores
	f.opt.Shrink = f.shrink
	if f.generate > 0 {
		if err := g.Validate(); err != nil {
			return nil, fmt.Errorf("--generate %d --dim %d: %w; give fewer points or dimensions", g.N, g.D, err)
		}
	}
	return f, nil
}

// define declares the flags on fs, into f, g (the generator) and inj.
func (f *flags) define(fs *flag.FlagSet, g *kernel.GenConfig, inj *injects) {
	fs.StringVar(&f.opt.Input, "input", "", "points `FILE`: CSV (one point per line) or the binary format (.bin, see apps/kmeans/points/doc.go)")
	fs.IntVar(&f.skip, "skip-columns", 0, "leave out the first `N` columns of every line of a CSV --input: an index or id column (a data frame's to_csv writes one); giving it, even 0, turns off the check for such a column")
	fs.StringVar(&f.sep, "sep", ",", "the `character` between the values of a CSV --input: ',', ';', '|', or tab")
	fs.IntVar(&f.generate, "generate", 0, "generate `N` points (Gaussian blobs) instead of reading --input")
	fs.IntVar(&g.D, "dim", g.D, "dimensions `D` of generated points")
	fs.Uint64Var(&g.Seed, "seed", g.Seed, "seed `S` of the generator and of the starting centroids")
	fs.IntVar(&g.Blobs, "blobs", g.Blobs, "number of Gaussian blobs generated")
	fs.IntVar(&f.opt.K, "k", 10, "number of clusters `K`")
	fs.IntVar(&f.opt.MaxIter, "max-iter", 30, "most iterations `I`")
	fs.Float64Var(&f.opt.Tol, "tol", 0, "stop once no centroid moves farther than `T`; 0 runs exactly --max-iter iterations")
	fs.StringVar(&f.opt.Init, "init", "", "starting centroids CSV `FILE` (k lines of d values); default: k points chosen by --seed")
	fs.IntVar(&f.opt.Every, "ckpt-every", 5, "checkpoint every `C` iterations (0: never; then a failure cannot be recovered)")
	fs.IntVar(&f.mirrors, "mirrors", 1, "copies of each checkpoint on other ranks (other hosts first)")
	fs.StringVar(&f.ckptDir, "ckpt-dir", "", "also write committed checkpoints to `DIR` (disk level; resume with gaspirun --resume DIR)")
	fs.BoolVar(&f.shrink, "shrink", false, "when a rank is lost and no spare is left, go on with fewer ranks: the next live rank takes over its shard (every rank must get this flag; the result is that of a --shrink run without failures)")
	fs.StringVar(&f.output, "output", "", "write the centroids as CSV to `FILE` (one per line, in cluster order)")
	fs.Var(inj, "inject", "inject a failure: kill:rank=R,iter=I | kill:host=H,iter=I | kill:leader,iter=I | kill:mirror-of=R,iter=I, optionally ,phase=commit (iter=0,phase=commit: the starting checkpoint's commit); kill:rank=R,iter=0,phase=init|ckpt-new: in the setup, before the starting centroids or the checkpointer's creation; store:rank=R,iter=I[,mode=wait|cancel]: rank R keeps storing into its right neighbour's memory from iteration I on, which checks that what a replaced process stores stays unseen (the chaos suite's; repeatable)")
	fs.StringVar(&f.impl, "impl", "auto", "distance kernel: auto, avx512, avx2, go, naive")
	fs.StringVar(&f.algo, "algo", "lloyd", "nearest-centroid search: lloyd (brute force), hamerly or yinyang (exact pruning: the same centroids bit for bit), or auto (yinyang when k·dim ≥ 5000, else lloyd)")
	fs.StringVar(&f.boundsMem, "bounds-memory", "2G", "most memory per kernel for the pruning bounds (`BYTES`, with an optional K, M or G suffix; 0: no bound): yinyang falls back to hamerly, hamerly to lloyd, when they would need more (the same centroids)")
	fs.StringVar(&f.seeding, "seeding", "random", "starting centroids without --init: random (k distinct points) or kmeans++ (D² sampling); both depend only on --seed, never on the number of ranks")
	fs.IntVar(&f.opt.Shards, "shards", 0, "fix the number of logical shards to `S` (0: one per rank): the result is then the same bits on any number of ranks up to S, and gaspirun --resume may use another number of ranks")
	fs.IntVar(&f.opt.Kernel.Threads, "threads", 1, "goroutines per rank for the distance kernel")
	fs.BoolVar(&f.quiet, "quiet", false, "no per-iteration lines")
	fs.StringVar(&f.history, "history", "", "write one CSV line per iteration to `FILE` (sse, moved, shift, time, epoch, failure/recovery/checkpoint events; see kmeans.HistoryHeader); plot it with kmeans plot")
	fs.BoolVar(&f.stamps, "timestamps", false, "start every per-iteration and recovery line with the time (RFC 3339, nanoseconds); the final line stays as it is")
}

// checkValues checks the numbers and the choice of input.
func (f *flags) checkValues(g kernel.GenConfig) error {
	switch {
	case f.opt.Input == "" && f.generate == 0:
		return errors.New("give --input FILE or --generate N")
	case f.opt.Input != "" && f.generate != 0:
		return errors.New("give either --input or --generate, not both")
	case f.generate < 0:
		return fmt.Errorf("--generate %d: want a positive number of points", f.generate)
	case f.opt.K < 1:
		return fmt.Errorf("--k %d: want at least 1 cluster", f.opt.K)
	case f.opt.MaxIter < 1:
		return fmt.Errorf("--max-iter %d: want at least 1", f.opt.MaxIter)
	case f.opt.Tol < 0 || f.opt.Tol != f.opt.Tol:
		return fmt.Errorf("--tol %v: want 0 or a positive distance", f.opt.Tol)
	case f.opt.Every < 0:
		return fmt.Errorf("--ckpt-every %d: want 0 (off) or a positive interval", f.opt.Every)
	case f.mirrors < 1:
		return fmt.Errorf("--mirrors %d: want at least 1", f.mirrors)
	case g.D < 1:
		return fmt.Errorf("--dim %d: give a dimension of at least 1", g.D)
	case g.D > kernel.MaxDim:
		return fmt.Errorf("--dim %d: give at most %d dimensions", g.D, kernel.MaxDim)
	case g.Blobs < 1 || g.Blobs > 1<<24:
		return fmt.Errorf("--blobs %d: give 1 to %d blobs", g.Blobs, 1<<24)
	case f.shrink && f.ckptDir != "":
		return errors.New("--shrink with --ckpt-dir: the disk level keeps one file per rank and cannot follow a job that shrank; drop one of them")
	case f.opt.Shards < 0:
		return fmt.Errorf("--shards %d: want 0 (one per rank) or a positive number of shards", f.opt.Shards)
	case f.opt.Kernel.Threads < 1:
		return fmt.Errorf("--threads %d: want at least 1", f.opt.Kernel.Threads)
	}
	return nil
}

// checkInjects checks that every injection can fire.
func (f *flags) checkInjects(inj injects) error {
	for _, st := range inj.stores {
		if f.opt.Every == 0 {
			return errors.New("--inject store: needs checkpoints to recover from: set --ckpt-every")
		}
		if st.Iter > f.opt.MaxIter {
			return fmt.Errorf("--inject store: at iteration %d never fires: --max-iter is %d", st.Iter, f.opt.MaxIter)
		}
	}
	for _, in := range inj.kills {
		if f.opt.Every == 0 {
			return errors.New("--inject needs checkpoints to recover from: set --ckpt-every")
		}
		if in.Iter > f.opt.MaxIter {
			return fmt.Errorf("--inject at iteration %d never fires: --max-iter is %d", in.Iter, f.opt.MaxIter)
		}
	}
	return nil
}

// resolve turns the flags given as names into options: outputs, kernel,
// algorithm, its memory, seeding, CSV layout.
func (f *flags) resolve(fs *flag.FlagSet) error {
	for _, o := range []struct{ flag, path string }{{"--output", f.output}, {"--history", f.history}} {
		if o.path != "" {
			if err := checkOutput(o.flag, o.path); err != nil {
				return err
			}
		}
	}
	var err error
	if f.opt.Kernel.Impl, err = kernel.ParseImpl(f.impl); err != nil {
		return err
	}
	if f.opt.Kernel.Algo, err = kernel.ParseAlgo(f.algo); err != nil {
		return err
	}
	if f.opt.Kernel.BoundsMemory, err = parseBytes(f.boundsMem); err != nil {
		return fmt.Errorf("--bounds-memory %q: %v", f.boundsMem, err)
	}
	if f.opt.Seeding, err = kernel.ParseSeeding(f.seeding); err != nil {
		return err
	}
	f.opt.Kernel.MaxIter = f.opt.MaxIter
	f.opt.CSV, err = csvLayout(fs, f)
	return err
}

// algoNote names the algorithm the rank ran, and why when it is not the
// one asked for: "yinyang", "auto: yinyang", "hamerly: yinyang's bounds
// exceed --bounds-memory".
func algoNote(c kernel.Config, k int, res kmeans.RunResult) string {
	want := c.Algo
	note := res.Algo.String()
	if want == kernel.AlgoAuto {
		note = "auto: " + note
		want = kernel.ChooseAlgo(want, k, len(res.Centroids)/k)
	}
	if res.Algo != want {
		note += fmt.Sprintf(": %s's bounds exceed --bounds-memory", want)
	}
	return note
}

// parseBytes parses a size: a whole number, with an optional K, M, G or T
// (binary: 1K = 1024).
func parseBytes(s string) (int64, error) {
	num, shift := strings.TrimSpace(s), 0
	if i := len(num) - 1; i > 0 {
		if p := strings.IndexByte("KMGT", num[i]&^0x20); p >= 0 {
			num, shift = num[:i], 10*(p+1)
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64>>shift {
		return 0, errors.New("want a size in bytes such as 512M or 4G, or 0 for no bound")
	}
	return v << shift, nil
}

// badInput reports whether err is about the input file (--input, --init):
// missing, unreadable or malformed.
func badInput(err error) bool {
	var fe *points.FileError
	return errors.As(err, &fe) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)
}

// csvLayout is the layout --skip-columns and --sep give; --skip-columns
// given, even as 0, says what the first column is (no index check).
func csvLayout(fs *flag.FlagSet, f *flags) (points.CSVLayout, error) {
	l := points.CSVLayout{Skip: f.skip}
	fs.Visit(func(fl *flag.Flag) { l.KeepIndex = l.KeepIndex || fl.Name == "skip-columns" })
	switch sep := []rune(f.sep); {
	case strings.EqualFold(f.sep, "tab") || f.sep == `\t`:
		l.Sep = '\t'
	case len(sep) == 1:
		l.Sep = sep[0]
	default:
		return l, fmt.Errorf("--sep %q: give one character, such as ';', or tab", f.sep)
	}
	if (l.KeepIndex || l.Sep != ',') && f.opt.Input == "" {
		return l, errors.New("--skip-columns and --sep are for a CSV --input")
	}
	return l, l.Validate()
}
