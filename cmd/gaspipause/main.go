// Command gaspipause is the pod sandbox's process for the local cluster of
// deploy/kubernetes/local-cluster.sh, which pulls no images: it holds the
// pod's namespaces, reaps the children that end up under it, and exits 0
// on SIGTERM or SIGINT. Built static and imported as the container
// runtime's sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
