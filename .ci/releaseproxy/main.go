// Command releaseproxy lays out a module proxy in a directory, as GOPROXY
// serves it, holding this repository's published modules at one release
// version, zipped from the checkout (the files git tracks or would add,
// so nothing ignored): what the tags of that release would publish. It
// first checks each go.mod as a release needs it: no replace directive,
// and every module of the repository it requires is one of the published
// modules, at the release version.
//
//	go run . -version v0.1.0 -out DIR MODULE_DIR...
//
// MODULE_DIR is relative to the repository root, the first one the root
// module ("."). .ci/release-check runs it (with GOWORK=off: this module
// is in no go.work, so that it is nobody's dependency) and then fetches
// the modules from DIR with GOPROXY=file://DIR.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the release version of every module (vX.Y.Z)")
	out := flag.String("out", "", "directory to lay the proxy out in")
	repo := flag.String("repo", ".", "the repository root")
	flag.Parse()
	if err := run(*repo, *version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "releaseproxy:", err)
		os.Exit(1)
	}
}

// published is one module of the release.
type published struct {
	dir  string // relative to the repository root, slash-separated
	path string
	mod  []byte // its go.mod
	file *modfile.File
}

func run(repo, version, out string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q: want a canonical semantic version such as v0.1.0", version)
	}
	if out == "" || len(dirs) == 0 || path.Clean(filepath.ToSlash(dirs[0])) != "." {
		return errors.New("usage: releaseproxy -version vX.Y.Z -out DIR . MODULE_DIR...")
	}
	mods, err := load(repo, dirs)
	if err != nil {
		return err
	}
	if err := check(mods, version); err != nil {
		return err
	}
	when, err := commitTime(repo)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if err := lay(repo, out, m, version, when); err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
	}
	return nil
}

// load reads each module's go.mod and checks that its path is the root
// module's path followed by its directory, as the tags assume.
func load(repo string, dirs []string) ([]published, error) {
	var mods []published
	for _, d := range dirs {
		d = path.Clean(filepath.ToSlash(d))
		name := path.Join(d, "go.mod")
		data, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s: no module line", name)
		}
		m := published{dir: d, path: f.Module.Mod.Path, mod: data, file: f}
		if len(mods) > 0 {
			if want := mods[0].path + "/" + d; m.path != want {
				return nil, fmt.Errorf("%s: module %s, want %s (its tag is %s/vX.Y.Z)", name, m.path, want, d)
			}
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// check refuses what a proxy would serve but a user could not build: a
// replace directive (go install refuses the module; go get ignores it,
// so the module would build differently for its users than here), a
// requirement of an unpublished module of the repository, or of a
// published one at another version than the release's.
func check(mods []published, version string) error {
	root := mods[0].path
	pub := map[string]bool{}
	for _, m := range mods {
		pub[m.path] = true
	}
	var errs []error
	for _, m := range mods {
		name := path.Join(m.dir, "go.mod")
		for _, r := range m.file.Replace {
			errs = append(errs, fmt.Errorf("%s:%d: replace %s: a published module has no replace directive (go.work is for local development)",
				name, r.Syntax.Start.Line, r.Old.Path))
		}
		for _, r := range m.file.Require {
			p := r.Mod.Path
			if p != root && !strings.HasPrefix(p, root+"/") {
				continue
			}
			switch {
			case !pub[p]:
				errs = append(errs, fmt.Errorf("%s:%d: requires %s, which is not published", name, r.Syntax.Start.Line, p))
			case r.Mod.Version != version:
				errs = append(errs, fmt.Errorf("%s:%d: requires %s %s, want the release version %s", name, r.Syntax.Start.Line, p, r.Mod.Version, version))
			}
		}
	}
	return errors.Join(errs...)
}

// commitTime is the time of the checkout's HEAD commit, the time the
// proxy gives the version (the go command shows it; nothing depends on it).
func commitTime(repo string) (time.Time, error) {
	cmd := exec.Command("git", "log", "-1", "--format=%cI")
	cmd.Dir = repo
	b, err := cmd.Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %w", err)
	}
	return time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
}

// lay writes the module's list, .info, .mod and .zip files under out.
func lay(repo, out string, m published, version string, when time.Time) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := moduleFiles(filepath.Join(repo, filepath.FromSlash(m.dir)))
	if err != nil {
		return err
	}
	var z bytes.Buffer
	if err := zip.Create(&z, module.Version{Path: m.path, Version: version}, files); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  m.mod,
		version + ".zip":  z.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleFiles lists the files of the module in dir as a commit of the
// work tree would hold them: tracked and untracked but not ignored files
// (git ls-files), less those deleted. zip.Create leaves out nested
// modules' files and checks the paths.
func moduleFiles(dir string) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", dir, err)
	}
	seen := map[string]bool{}
	var files []zip.File
	for _, p := range strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00") {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		full := filepath.Join(dir, filepath.FromSlash(p))
		info, err := os.Lstat(full)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree: not in the next commit
		} else if err != nil {
			return nil, err
		}
		files = append(files, diskFile{slash: p, full: full, info: info})
	}
	return files, nil
}

// diskFile is a file of the work tree, for zip.Create.
type diskFile struct {
	slash string
	full  string
	info  os.FileInfo
}

func (f diskFile) Path() string                 { return f.slash }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
