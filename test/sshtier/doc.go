// Package sshtier tests gaspirun --hostfile over real ssh: three simulated
// hosts (network namespaces on a bridge, package internal/testkit/simhost), an
// OpenSSH sshd in each, in the foreground with its own configuration on a
// port of its own (node1 on 2201, node2 on 2202, node3 on 2203), host and
// user keys made by the test, and gaspirun in the root namespace with
// --ssh "ssh -F CONFIG", where CONFIG names the hosts as ssh aliases. It
// holds tests only.
//
// The job is fault-tolerant K-means (apps/kmeans/cmd/kmeans), 4 ranks and
// 2 spares from a hostfile of three hosts with 2 slots each: gaspirun
// places ranks 0 and 1 on node1, ranks 2 and 3 on node2 and the spares on
// node3.
//
//   - TestSSHHostCrash: once the job has done 10 iterations everything on
//     node2 is SIGKILLed, its sshd included. gaspirun sees both ssh
//     sessions end without an exit status, counts the two ranks as lost,
//     the spares take over, and the job ends with exit 0 and the
//     failure-free checksum (from a local gaspirun run of the same job).
//     No process's argv and no file of the test holds the job token, and
//     nothing of the job is left on any host.
//   - TestSSHHostCutOff: node2 drops off the network for good after
//     iteration 10 (simhost.Silent). The spares take over, the job ends
//     with exit 0 and the failure-free checksum, gaspirun stops node2's
//     unreachable processes through their connections, and nothing of the
//     job outlives its ssh sessions on node2.
//   - TestSSHDroppedConnectionAndInterrupt: the ssh client of rank 3 is
//     SIGKILLed; its sshd ends the session and the remote side kills rank
//     3, which a spare replaces. Then gaspirun gets SIGINT and tears the
//     job down on every host: exit 130 and nothing left anywhere.
//
// The tests skip, saying what is missing, without root and iproute2 (for
// the hosts), without /usr/sbin/sshd (Debian package openssh-server) or
// ssh and ssh-keygen (openssh-client), and under -short. Run them alone
// with
//
//	go test -count=1 -v ./test/sshtier
package sshtier
