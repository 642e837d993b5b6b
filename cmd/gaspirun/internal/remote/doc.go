// Package remote is the remote side of a gaspirun process started through
// ssh or srun, "gaspirun --remote-exec" (Exec), and the protocol it speaks
// with gaspirun over the connector's stdin and stdout (protocol.go): a
// header with the program, its arguments and its environment (never in
// an argv: it holds the job token; one header for all the tasks of a
// step, each picking its process by SLURM_PROCID), control lines after
// it ("ping", "signal N", "signal N LIST" in a step), and a status line
// with the program's real exit code or signal at the end of its stdout.
//
// gaspirun's back ends (cmd/gaspirun/internal/launch) write the header
// and the control lines and read the status line; Exec, on the host,
// reads the one and writes the other. The environment a process gets,
// here or on the far side (MergeEnviron), is defined here too, so that
// both sides build it the same way.
//
// Concurrency: Exec starts the header read, the relay of the program's
// stdout, the waiter and the control reader. It returns once the program
// has exited, its process group is killed and its stdout relayed (or cut
// off after the header's Grace); the control reader, and a header read
// that timed out, end with stdin, or with the process, which exits with
// Exec's code.
package remote
