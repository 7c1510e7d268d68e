//go:build !linux

package main

import "syscall"

// workerSysProcAttr: without a parent-death signal, a worker exits at the
// end of its stdin, which it sees when the parent dies.
func workerSysProcAttr() *syscall.SysProcAttr { return nil }
