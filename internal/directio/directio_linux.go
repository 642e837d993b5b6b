package directio

import (
	"errors"
	"os"
	"syscall"
)

// setDirect sets or clears O_DIRECT on f.
func setDirect(f *os.File, on bool) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		fl, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e != 0 {
			serr = e
			return
		}
		if on {
			fl |= syscall.O_DIRECT
		} else {
			fl &^= syscall.O_DIRECT
		}
		if _, _, e = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, fl); e != 0 {
			serr = e
		}
	})
	if err != nil {
		return err
	}
	return serr
}

func isInvalid(err error) bool { return errors.Is(err, syscall.EINVAL) }
