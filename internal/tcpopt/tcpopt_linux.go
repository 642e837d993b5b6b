package tcpopt

import "syscall"

// tcpRTOMaxMS is TCP_RTO_MAX_MS (Linux 6.15 and later), which the
// syscall package does not name.
const tcpRTOMaxMS = 44

func setOptions(fd int) {
	// ENOPROTOOPT on an older kernel: it keeps its own bound.
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, tcpRTOMaxMS, int(MaxRetransmit.Milliseconds()))
}

// retransmitBound reads the option back: the bound in milliseconds, or
// false where the kernel has no such option.
func retransmitBound(fd int) (int, bool) {
	v, err := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, tcpRTOMaxMS)
	return v, err == nil
}
