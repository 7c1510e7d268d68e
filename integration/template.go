package integration

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// initdb is the slowest step of Start (it probes the server configuration
// with a dozen server launches). The first cluster of a process therefore
// keeps a pristine copy of its initdb output in its own directory, and
// clusters started while it is open copy that instead of running initdb.
// Closing the cluster drops the template with the rest of its directory.
var templates = struct {
	sync.Mutex                          // also held while a template is read or made
	owner      map[string]*localServers // binary directory → cluster holding a template
}{owner: map[string]*localServers{}}

// templateDir is the name of the template inside a cluster directory.
const templateDir = "template"

// initData fills the empty data directory of n with a new database cluster
// (superuser postgres, trust authentication, UTF8, C locale).
func (s *localServers) initData(ctx context.Context, n *localNode) error {
	templates.Lock()
	defer templates.Unlock()
	t := time.Now()
	if owner := templates.owner[s.bin.dir]; owner != nil {
		err := s.copyTree(filepath.Join(owner.dir, templateDir), n.data)
		if err == nil {
			_, err = newSystemIdentifier(n.data)
		}
		if err == nil {
			s.logf("integration: copied initdb template in %v", time.Since(t).Round(time.Millisecond))
			return nil
		}
		s.logf("integration: copying initdb template: %v; running initdb", err)
		if err := os.RemoveAll(n.data); err != nil {
			return fmt.Errorf("integration: %w", err)
		}
	}
	_, err := s.run(ctx, "initdb", "-D", n.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return err
	}
	s.logf("integration: initdb took %v", time.Since(t).Round(time.Millisecond))
	if err := s.copyTree(n.data, filepath.Join(s.dir, templateDir)); err != nil {
		s.logf("integration: keeping initdb template: %v", err) // only an optimisation
		return nil
	}
	templates.owner[s.bin.dir] = s
	return nil
}

// dropTemplate stops offering c's template to new clusters.
func (s *localServers) dropTemplate() {
	templates.Lock()
	defer templates.Unlock()
	if templates.owner[s.bin.dir] == s {
		delete(templates.owner, s.bin.dir)
	}
}

// copyTree copies the directory tree src to dst (which must not exist),
// keeping permissions and giving everything to the server user.
func (s *localServers) copyTree(src, dst string) error {
	return s.copyTreeFiltered(src, dst, false, nil)
}

// copyTreeFiltered is copyTree with a filter, which sees each path
// relative to src and may skip it or, for a directory, its contents (the
// directory itself is still made). With live, src belongs to a running
// server: a file or directory that vanishes during the copy is left out
// instead of failing it.
func (s *localServers) copyTreeFiltered(src, dst string, live bool,
	filter func(rel string, d fs.DirEntry) (skip, skipContents bool)) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if live && path != src && isVanished(err) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		var skip, skipContents bool
		if filter != nil && rel != "." {
			skip, skipContents = filter(rel, d)
		}
		if skip {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			if live && isVanished(err) {
				return nil
			}
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
			// Mkdir applies the umask; data directories need exact modes.
			if err := os.Chmod(target, info.Mode().Perm()); err != nil {
				return err
			}
			if skipContents {
				if err := s.acct.chown(target); err != nil {
					return err
				}
				return filepath.SkipDir
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				if live && isVanished(err) {
					return nil
				}
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			if s.acct.switched {
				return os.Lchown(target, s.acct.uid, s.acct.gid)
			}
			return nil
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				if live && isVanished(err) {
					return nil
				}
				return err
			}
		default:
			return fmt.Errorf("unexpected file type %v of %s", d.Type(), path)
		}
		return s.acct.chown(target)
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, perm)
}
