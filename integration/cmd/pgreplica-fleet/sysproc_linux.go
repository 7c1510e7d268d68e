//go:build linux

package main

import "syscall"

// workerSysProcAttr makes the kernel kill a worker when the parent dies,
// even by SIGKILL (its stdin's end of file covers the other cases).
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
