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
//   - TestSSHHostFaults: the host scenarios of package
//     internal/testkit/hostfault (the table test/mhtier runs without
//     gaspirun), each a subtest, the fault striking once the job has done
//     10 iterations. In every one the spares take the struck host's two
//     ranks and the job ends with exit 0 and the failure-free checksum
//     (from a local gaspirun run of the same job); no process's argv and
//     no file of the test holds the job token; nothing of the job is left
//     on any host. HostCrash (node2) and RendezvousHostCrash (node1): the
//     host's sshd dies too, and gaspirun sees both ssh sessions end
//     without an exit status and counts the two ranks as lost.
//     HostCutOff: node2 drops off the network for good (simhost.Silent);
//     gaspirun stops its unreachable processes through their connections,
//     and nothing of the job outlives its ssh sessions there.
//     HostCutAndHealed: node2 is cut off for 4 s, then healed; its
//     replaced processes end as fenced (77) before the job does.
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
