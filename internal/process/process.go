// Package process answers questions about operating-system processes on
// this machine.
package process

import (
	"errors"
	"os"
	"strings"
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

// Namespace identifies the set of processes Alive can see: this boot of
// this machine and this process-ID namespace (a container has its own).
// Two processes with the same Namespace can check each other's liveness.
// Empty where the system does not tell (then nothing is concluded from a
// pid).
func Namespace() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
}
