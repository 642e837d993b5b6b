//go:build !linux

package tcpopt

func setOptions(int) {}

func retransmitBound(int) (int, bool) { return 0, false }
