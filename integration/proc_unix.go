//go:build unix

package integration

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// account is the OS identity the server processes run as.
type account struct {
	name     string
	uid, gid int
	switched bool // true when it differs from ours and needs setuid
}

// serverAccount returns the identity for the servers: ourselves unless we
// are root, in which case "postgres" or, failing that, "nobody".
func serverAccount() (account, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return account{name: name, uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return account{name: name, uid: uid, gid: gid, switched: true}, nil
	}
	return account{}, fmt.Errorf("integration: running as root and neither OS user %q nor %q exists; "+
		"PostgreSQL refuses to run as root (create a user named postgres)", "postgres", "nobody")
}

// sysProcAttr returns the process attributes that run a command as a.
func (a account) sysProcAttr() *syscall.SysProcAttr {
	if !a.switched {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(a.uid), Gid: uint32(a.gid), Groups: []uint32{},
	}}
}

// chown gives path to a (a no-op when no switch is needed).
func (a account) chown(path string) error {
	if !a.switched {
		return nil
	}
	return os.Chown(path, a.uid, a.gid)
}

// signalProcess sends sig to pid; a process already gone is no error.
func signalProcess(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return nil
	}
	err := syscall.Kill(pid, sig)
	if err == syscall.ESRCH {
		return nil
	}
	return err
}

// serverProcs returns the live processes of the server whose data
// directory is data (a path without symbolic links) and whose postmaster
// is pm (0 if unknown). Every PostgreSQL process works in its data
// directory, so where /proc exists they are the processes whose current
// directory is data: this finds the backends and auxiliary processes too
// (each of them leads a process group of its own, so signalling the
// postmaster's group would miss them), also once the postmaster is gone,
// and it skips zombies, which an init that does not reap keeps forever.
// Without /proc it checks the postmaster alone.
func serverProcs(data string, pm int) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		if pm > 0 && syscall.Kill(pm, 0) != syscall.ESRCH {
			return []int{pm}
		}
		return nil
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", p.Name(), "cwd")); err == nil && cwd == data {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ownGroup returns process attributes that put a child in a process group
// of its own, out of reach of signals aimed at ours (a terminal's Ctrl-C).
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// canReach reports an error unless a can traverse every directory from the
// root down to dir (a server running as another user than ours cannot use
// a data directory, or binaries, under, say, a 0700 home directory).
func (a account) canReach(dir string) error {
	if !a.switched {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			mode := fi.Mode().Perm()
			var search fs.FileMode = 0o001 // others
			switch {
			case int(st.Uid) == a.uid:
				search = 0o100
			case int(st.Gid) == a.gid:
				search = 0o010
			}
			if mode&search == 0 {
				return fmt.Errorf("the server runs as OS user %s, which cannot enter %s (mode %v)", a.name, d, mode)
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
