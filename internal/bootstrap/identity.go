package bootstrap

// Who this process is: PGAS_JOIN, and the process id and the job's counts
// from the first of the sources (the PGAS variables, Slurm, Open MPI, PMI,
// Kubernetes) whose variables are set, or a joiner's.

import (
	"cmp"
	"fmt"
)

// parseJoin reads PGAS_JOIN.
func parseJoin(get getter) (bool, error) {
	v, ok := get(VarJoin)
	if !ok {
		return false, nil
	}
	switch v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, &EnvError{Var: VarJoin, Value: v, Problem: "not 1 or 0",
		Fix: "use 1 for a process started after the job formed, to join it as a spare (the launcher sets it), or 0 (or unset) for a process of the job as started"}
}

// A source is where a process the job was started with learns who it
// is: the PGAS variables (gaspirun, or set by hand) or a launcher's own.
type source struct {
	launcher Launcher
	name     string   // for messages
	procVar  string   // this process's index: set when this source started the process
	sizeVars []string // the number of processes, first set wins; none: PGAS_NPROCS is required
	jobVar   string   // job id, optional
	hostVar  string   // host name, optional
	example  string   // how to set PGAS_RENDEZVOUS under this launcher
	// noSize and noSizeFix say what is wrong, and what to do, when the
	// number of processes is unknown; empty: the launchers' common words.
	noSize, noSizeFix string
}

// sources are the sources FromLookup reads a process's identity from, in
// the order it looks for them: PGAS_PROC takes precedence.
var sources = []source{
	{launcher: LauncherPGAS, name: "gaspirun", procVar: VarProc, sizeVars: []string{VarNumProcs},
		noSize:    "PGAS_PROC is set, so the PGAS variables are in use",
		noSizeFix: "set PGAS_NPROCS to the number of processes of the job (ranks plus spares), or start the program with gaspirun"},
	// The step's task count first: SLURM_NTASKS may be the allocation's
	// when srun runs a step of fewer tasks.
	{launcher: LauncherSlurm, name: "Slurm", procVar: "SLURM_PROCID", sizeVars: []string{"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"},
		jobVar: "SLURM_JOB_ID", hostVar: "SLURMD_NODENAME",
		example: `e.g. export PGAS_RENDEZVOUS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1):29400`},
	{launcher: LauncherOpenMPI, name: "Open MPI", procVar: "OMPI_COMM_WORLD_RANK", sizeVars: []string{"OMPI_COMM_WORLD_SIZE"},
		example: "e.g. mpirun -x PGAS_RENDEZVOUS=firsthost:29400 -x PGAS_TOKEN ..."},
	{launcher: LauncherPMI, name: "PMI", procVar: "PMI_RANK", sizeVars: []string{"PMI_SIZE"},
		example: "e.g. mpiexec -genv PGAS_RENDEZVOUS firsthost:29400 -genv PGAS_TOKEN ... "},
	{launcher: LauncherKubernetes, name: "a Kubernetes Indexed Job", procVar: "JOB_COMPLETION_INDEX",
		example:   "e.g. PGAS_RENDEZVOUS=<job>-0.<headless-service>:29400 in the pod template",
		noSizeFix: "set PGAS_NPROCS to the Job's .spec.completions (Indexed Jobs do not export it)"},
}

// joinerSource is where a joiner's identity comes from: the PGAS
// variables, read by joinerIdentity.
var joinerSource = &source{launcher: LauncherPGAS, name: "a joiner", procVar: VarJoin}

// how says, for messages, what started the process: "Slurm (SLURM_PROCID
// is set)".
func (s *source) how() string { return s.name + " (" + s.procVar + " is set)" }

// identity reads the process id and the job's counts of a process the
// job was started with, from the first of sources whose process variable
// is set.
func identity(get getter) (Env, *source, error) {
	for i := range sources {
		if v, ok := get(sources[i].procVar); ok {
			e, err := sources[i].read(get, v)
			return e, &sources[i], err
		}
	}
	return Env{}, nil, &EnvError{Var: VarProc, Unset: true,
		Problem: "the program was not started by gaspirun, and no Slurm (SLURM_PROCID), Open MPI (OMPI_COMM_WORLD_RANK), PMI (PMI_RANK) or Kubernetes (JOB_COMPLETION_INDEX) variables are set",
		Fix:     "run it with gaspirun -n N PROGRAM, or set PGAS_PROC, PGAS_NPROCS, PGAS_RENDEZVOUS and PGAS_TOKEN yourself"}
}

// read reads the identity s gives, proc being the process's index.
func (s *source) read(get getter, proc string) (Env, error) {
	e := Env{Launcher: s.launcher}
	sizeVar, size, err := s.size(get)
	if err != nil {
		return Env{}, err
	}
	if v, ok := get(s.jobVar); ok && s.jobVar != "" {
		e.JobID = v
	}
	if v, ok := get(s.hostVar); ok && s.hostVar != "" {
		e.Host = v
	}
	n, err := parseCount(sizeVar, size, 1, MaxProcs,
		"set it to the number of processes of the job (ranks plus spares)")
	if err != nil {
		return Env{}, err
	}
	e.NumProcs = n
	p, err := parseCount(s.procVar, proc, 0, n-1,
		fmt.Sprintf("process ids run from 0 to %d (%s=%d); give each process a distinct id in that range", n-1, sizeVar, n))
	if err != nil {
		return Env{}, err
	}
	e.Proc = uint32(p)
	if e.NumRanks, err = ranks(get, n, sizeVar); err != nil {
		return Env{}, err
	}
	return e, nil
}

// size finds the number of processes: the first of s's sizeVars that is
// set, which PGAS_NPROCS, if set, must agree with (and stands in for).
func (s *source) size(get getter) (name, value string, err error) {
	for _, sv := range s.sizeVars {
		if v, ok := get(sv); ok {
			name, value = sv, v
			break
		}
	}
	if pv, ok := get(VarNumProcs); ok {
		if name != "" && pv != value {
			return "", "", &EnvError{Var: VarNumProcs, Value: pv,
				Problem: fmt.Sprintf("disagrees with %s=%s", name, value),
				Fix:     fmt.Sprintf("unset PGAS_NPROCS (it defaults to %s) or make the two equal", name)}
		}
		name, value = VarNumProcs, pv
	}
	if name == "" {
		problem := cmp.Or(s.noSize, "started by "+s.how()+" but the number of processes is unknown")
		fix := cmp.Or(s.noSizeFix, "set PGAS_NPROCS to the number of processes of the job (ranks plus spares)")
		return "", "", &EnvError{Var: VarNumProcs, Unset: true, Problem: problem, Fix: fix}
	}
	return name, value, nil
}

// ranks reads the number of ranks of a job of n processes (sizeVar):
// PGAS_NRANKS or n minus PGAS_SPARES, which must agree when both are set;
// n when neither is.
func ranks(get getter, n int, sizeVar string) (int, error) {
	r := n
	spares, haveSpares := get(VarSpares)
	if haveSpares {
		k, err := parseCount(VarSpares, spares, 0, n-1,
			fmt.Sprintf("it must leave at least one rank: 0..%d for %s=%d", n-1, sizeVar, n))
		if err != nil {
			return 0, err
		}
		r = n - k
	}
	if v, ok := get(VarNumRanks); ok {
		nr, err := parseCount(VarNumRanks, v, 1, n,
			fmt.Sprintf("it must be 1..%d (%s=%d; the rest are spares)", n, sizeVar, n))
		if err != nil {
			return 0, err
		}
		if haveSpares && nr != r {
			return 0, &EnvError{Var: VarNumRanks, Value: v,
				Problem: fmt.Sprintf("disagrees with PGAS_SPARES=%s and %s=%d (%d+%s != %d)", spares, sizeVar, n, nr, spares, n),
				Fix:     "set only one of PGAS_NRANKS and PGAS_SPARES"}
		}
		r = nr
	}
	return r, nil
}

// joinerIdentity reads the id and counts of a joiner (PGAS_JOIN=1), a
// process started after the job formed. Every one of them is optional:
// PGAS_PROC is the id the launcher reserved for it (Server.Reserve), and
// without it the rendezvous assigns one (Proc is JoinerID until then);
// PGAS_NPROCS, PGAS_NRANKS and PGAS_SPARES, when set, must be the job's
// (the member table has them in any case). The other launchers' ids are
// ignored, since they number the joiner's own step, not the job; only the
// host label is taken from Slurm (SLURMD_NODENAME, as for the job's
// processes), so that a joiner on a node counts as that node.
func joinerIdentity(get getter) (Env, error) {
	e := Env{Join: true, Launcher: LauncherPGAS, Proc: JoinerID}
	if v, ok := get(VarNumProcs); ok {
		n, err := parseCount(VarNumProcs, v, 1, MaxProcs,
			"a joiner may leave it unset (the member table has it); if set, it must be the job's number of processes as started, ranks plus spares")
		if err != nil {
			return Env{}, err
		}
		e.NumProcs = n
	}
	if v, ok := get(VarProc); ok {
		p, err := parseCount(VarProc, v, 0, MaxProcs-1,
			"a joiner may leave it unset (the rendezvous assigns an id); if set, it must be the id the launcher reserved for this joiner")
		if err != nil {
			return Env{}, err
		}
		e.Proc = uint32(p)
	}
	spares, haveSpares := get(VarSpares)
	if haveSpares {
		if e.NumProcs == 0 {
			return Env{}, &EnvError{Var: VarSpares, Value: spares, Problem: "set for a joiner without PGAS_NPROCS",
				Fix: "unset it (the member table has the job's counts), or set PGAS_NPROCS too"}
		}
		k, err := parseCount(VarSpares, spares, 0, e.NumProcs-1,
			fmt.Sprintf("it must be the job's number of spares as started, 0..%d for PGAS_NPROCS=%d", e.NumProcs-1, e.NumProcs))
		if err != nil {
			return Env{}, err
		}
		e.NumRanks = e.NumProcs - k
	}
	if v, ok := get(VarNumRanks); ok {
		hi := MaxProcs
		if e.NumProcs > 0 {
			hi = e.NumProcs
		}
		r, err := parseCount(VarNumRanks, v, 1, hi,
			"a joiner may leave it unset (the member table has it); if set, it must be the job's number of ranks")
		if err != nil {
			return Env{}, err
		}
		if haveSpares && r != e.NumRanks {
			return Env{}, &EnvError{Var: VarNumRanks, Value: v,
				Problem: fmt.Sprintf("disagrees with PGAS_SPARES=%s and PGAS_NPROCS=%d (%d+%s != %d)", spares, e.NumProcs, r, spares, e.NumProcs),
				Fix:     "set only one of PGAS_NRANKS and PGAS_SPARES, or neither"}
		}
		e.NumRanks = r
	}
	if v, ok := get("SLURMD_NODENAME"); ok {
		e.Host = v
	}
	return e, nil
}
