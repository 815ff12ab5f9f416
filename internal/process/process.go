// Package process answers questions about operating-system processes on
// this machine.
package process

import (
	"errors"
	"os"
	"syscall"
)

// Alive reports whether a process with this ID runs on this machine
// (signal 0 checks without sending anything; EPERM means it runs as
// another user).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}
