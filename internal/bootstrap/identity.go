package bootstrap

// Who this process is: PGAS_JOIN, and the process id and the job's counts
// from the PGAS variables or from the first launcher (Slurm, Open MPI,
// PMI, Kubernetes) whose variables are set, or a joiner's.

import (
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

// identity reads the process id and the job's counts of a process the
// job was started with: from the PGAS variables, or else from the first
// launcher of foreigns whose variables are set. how and example are for
// messages about the variables read after it.
func identity(get getter) (e Env, how, example string, err error) {
	var procVar, procVal, sizeVar, sizeVal string
	if v, ok := get(VarProc); ok {
		e.Launcher = LauncherPGAS
		procVar, procVal = VarProc, v
		how = "gaspirun (PGAS_PROC is set)"
		sizeVar = VarNumProcs
		var ok2 bool
		if sizeVal, ok2 = get(VarNumProcs); !ok2 {
			return Env{}, "", "", &EnvError{Var: VarNumProcs, Unset: true,
				Problem: "PGAS_PROC is set, so the PGAS variables are in use",
				Fix:     "set PGAS_NPROCS to the number of processes of the job (ranks plus spares), or start the program with gaspirun"}
		}
	} else {
		var f *foreign
		for i := range foreigns {
			if v, ok := get(foreigns[i].procVar); ok {
				f = &foreigns[i]
				procVar, procVal = f.procVar, v
				break
			}
		}
		if f == nil {
			return Env{}, "", "", &EnvError{Var: VarProc, Unset: true,
				Problem: "the program was not started by gaspirun, and no Slurm (SLURM_PROCID), Open MPI (OMPI_COMM_WORLD_RANK), PMI (PMI_RANK) or Kubernetes (JOB_COMPLETION_INDEX) variables are set",
				Fix:     "run it with gaspirun -n N PROGRAM, or set PGAS_PROC, PGAS_NPROCS, PGAS_RENDEZVOUS and PGAS_TOKEN yourself"}
		}
		e.Launcher = f.launcher
		how = f.name + " (" + f.procVar + " is set)"
		example = f.example
		for _, sv := range f.sizeVars {
			if v, ok := get(sv); ok {
				sizeVar, sizeVal = sv, v
				break
			}
		}
		if pv, ok := get(VarNumProcs); ok {
			if sizeVar != "" && pv != sizeVal {
				return Env{}, "", "", &EnvError{Var: VarNumProcs, Value: pv,
					Problem: fmt.Sprintf("disagrees with %s=%s", sizeVar, sizeVal),
					Fix:     fmt.Sprintf("unset PGAS_NPROCS (it defaults to %s) or make the two equal", sizeVar)}
			}
			sizeVar, sizeVal = VarNumProcs, pv
		}
		if sizeVar == "" {
			fix := "set PGAS_NPROCS to the number of processes of the job (ranks plus spares)"
			if f.launcher == LauncherKubernetes {
				fix = "set PGAS_NPROCS to the Job's .spec.completions (Indexed Jobs do not export it)"
			}
			return Env{}, "", "", &EnvError{Var: VarNumProcs, Unset: true,
				Problem: "started by " + how + " but the number of processes is unknown", Fix: fix}
		}
		if v, ok := get(f.jobVar); ok && f.jobVar != "" {
			e.JobID = v
		}
		if v, ok := get(f.hostVar); ok && f.hostVar != "" {
			e.Host = v
		}
	}

	n, err := parseCount(sizeVar, sizeVal, 1, MaxProcs,
		"set it to the number of processes of the job (ranks plus spares)")
	if err != nil {
		return Env{}, "", "", err
	}
	e.NumProcs = n
	p, err := parseCount(procVar, procVal, 0, n-1,
		fmt.Sprintf("process ids run from 0 to %d (%s=%d); give each process a distinct id in that range", n-1, sizeVar, n))
	if err != nil {
		return Env{}, "", "", err
	}
	e.Proc = uint32(p)

	e.NumRanks = n
	spares, haveSpares := get(VarSpares)
	if haveSpares {
		k, err := parseCount(VarSpares, spares, 0, n-1,
			fmt.Sprintf("it must leave at least one rank: 0..%d for %s=%d", n-1, sizeVar, n))
		if err != nil {
			return Env{}, "", "", err
		}
		e.NumRanks = n - k
	}
	if v, ok := get(VarNumRanks); ok {
		r, err := parseCount(VarNumRanks, v, 1, n,
			fmt.Sprintf("it must be 1..%d (%s=%d; the rest are spares)", n, sizeVar, n))
		if err != nil {
			return Env{}, "", "", err
		}
		if haveSpares && r != e.NumRanks {
			return Env{}, "", "", &EnvError{Var: VarNumRanks, Value: v,
				Problem: fmt.Sprintf("disagrees with PGAS_SPARES=%s and %s=%d (%d+%s != %d)", spares, sizeVar, n, r, spares, n),
				Fix:     "set only one of PGAS_NRANKS and PGAS_SPARES"}
		}
		e.NumRanks = r
	}

	return e, how, example, nil
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
