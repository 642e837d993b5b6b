// Package mhjob starts a gaspigo job across simulated hosts (package
// simhost) the way a cluster launcher without gaspirun would: one process
// per entry of Config.Hosts, started inside its host's namespace with the
// bare PGAS_* environment contract of cmd/gaspirun (PGAS_PROC,
// PGAS_NPROCS, PGAS_SPARES, PGAS_RENDEZVOUS, PGAS_TOKEN, PGAS_HOST,
// PGAS_JOB_ID, and PGAS_SERVE_RENDEZVOUS=1 on process 0). The job token
// travels in the environment only, never in argv.
//
//	j, err := mhjob.Start(ctx, mhjob.Config{Cluster: c, Program: bin, Args: args,
//		Hosts: []int{0, 0, 1, 1, 2, 2}, Spares: 2})
//	defer j.Kill()
//	l, err := j.WaitLine(ctx, func(l proctest.Line) bool { return strings.HasPrefix(l.Text, "iter") })
//	c.Crash(c.Host(1))
//	err = j.Wait(ctx)
//	for _, p := range j.Procs() { code, sig, end, _ := p.Exit(); host := j.Host(p.ID) ... }
//
// The Job is proctest's runner (proctest.Job) over the processes: every
// line a process writes is kept with the time it arrived and its process
// id, and Text prints the lines prefixed like gaspirun's output ("[p3]
// ..."), so the checks written for gaspirun jobs read them too. Kill
// SIGKILLs whatever still runs, and Wait returns once every process has
// ended. Methods are safe for concurrent use.
package mhjob
