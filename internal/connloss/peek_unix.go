//go:build unix

package connloss

import (
	"errors"
	"net"
	"syscall"
)

// quiet peeks at the socket without blocking: EAGAIN means open with
// nothing to read.
func quiet(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	// Control, not Read: pgx may have a reader goroutine blocked in a Read
	// of this connection (holding the descriptor's read lock). The peek
	// neither blocks nor consumes, so it is safe beside that reader.
	var rerr error
	var buf [1]byte
	if err := raw.Control(func(fd uintptr) {
		_, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	if errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) {
		return true
	}
	if errors.Is(rerr, syscall.EINTR) {
		return true
	}
	// No error: closed by the peer (0 bytes) or something to read; another
	// error: the socket is broken.
	return false
}
