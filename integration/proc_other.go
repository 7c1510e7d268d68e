//go:build !unix

package integration

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

type account struct {
	name     string
	uid, gid int
	switched bool
}

func serverAccount() (account, error) {
	return account{}, fmt.Errorf("%w (the harness does not support %s)", ErrNoPostgres, runtime.GOOS)
}

func (a account) sysProcAttr() *syscall.SysProcAttr { return nil }
func (a account) chown(string) error                { return nil }

var errUnsupported = errors.New("integration: unsupported platform")

func signalProcess(int, syscall.Signal) error { return errUnsupported }
func serverProcs(string, int) []int           { return nil }
func ownGroup() *syscall.SysProcAttr          { return nil }
func (a account) canReach(string) error       { return nil }
