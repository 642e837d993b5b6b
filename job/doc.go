// Package job is the composition root of a process started by gaspirun
// (or srun, mpirun, a Kubernetes Indexed Job): it reads the environment
// contract once (internal/bootstrap.FromEnv, PGAS_LOG; PGAS_LOG unset
// means warnings and errors only) and wires the
// pieces a pgas.Runtime is given, which know nothing of the environment:
//
//   - the data-plane transport (transport/tcp), on a listener bound to
//     loopback for a one-host job and to every interface otherwise, with
//     the fault injection of PGAS_NETFAULT_DIR (internal/netfault), its
//     readers polling their sockets for PGAS_TCP_SPIN (unset: AutoTCPSpin
//     when the machine runs no more of the job's processes than it has
//     CPUs, whatever their host labels: tcpspin.go, machine.go);
//   - the runtime's fault point of PGAS_FAULTPOINT (internal/faultpoint:
//     a SIGKILL at a named point, pgas.Config.FaultPoint), for the chaos
//     suite;
//   - unless PGAS_SHM=0, the shared-memory transport (transport/shm) for
//     the processes with this process's host label (the member table's
//     Host, from PGAS_HOST), whose address travels in the member table
//     (Extra "shm"), and the router (transport/route) that the runtime
//     gets: same-host peers over shared memory, the others over TCP.
//     PGAS_SHM_SPIN sets how long its receivers poll before sleeping;
//     segments live in shared memory as well unless PGAS_SHM_SEGMENTS=0
//     (pgas.Config.DirectShm: a write to a same-host rank is a copy);
//   - the address the other processes dial (PGAS_ADVERTISE_HOST, else
//     this host's route to the rendezvous, else an interface that is up);
//   - the rendezvous (internal/bootstrap): the member table, and the
//     session to the launcher, which becomes the runtime's pgas.Launcher;
//   - with Options.FaultTolerant, the Raft membership (package spares) on
//     two listeners of its own, and the failure detector (package health),
//     their timing stretched by one factor for the whole job when a host
//     is oversubscribed (stretch.go), from the CPUs every process
//     publishes in the member table (Extra "cpus" and "cpuset");
//   - observability (internal/metrics): the Prometheus endpoint of
//     PGAS_METRICS, its address published in the member table
//     ("metrics"), and the trace buffer of PGAS_TRACE, written to
//     DIR/trace-proc-N.json when the runtime closes (with the launcher
//     session).
//
// A fault-tolerant program:
//
//	rt, err := job.Init(ctx, job.Options{FaultTolerant: true})
//	if err != nil {
//		os.Exit(job.ExitCode(err)) // a spare the job never needed exits 0
//	}
//	defer rt.Close()
//
// The import direction is job -> spares -> pgas: nothing below imports
// job, so the runtime can be built over other transports (transport/mem
// in tests) and other memberships. Init blocks until the rendezvous
// completes (at most PGAS_RENDEZVOUS_TIMEOUT: ErrRendezvousTimeout) and,
// on a spare, until it is promoted. The Runtime it returns owns
// everything Init built: Close (or Finalize) closes the transport, the
// membership and the launcher session.
package job
