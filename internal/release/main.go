// Command release sets idem's version across its modules and checks that the
// working tree, served as that version, is what a user can `go get`.
//
// idem is several Go modules (the core and one per heavy adapter, like
// River). They require each other at the version being released and carry
// no replace directives: go.work ties them together for development only,
// and a replace in a dependency's go.mod is ignored by every user.
//
//	go run ./internal/release check            # what make test runs
//	go run ./internal/release version v0.2.0   # set the version, check, print the tags
//	go run ./internal/release proxy DIR        # write the module proxy only
//	go run ./internal/release tidy             # go mod tidy every module
//	go run ./internal/release deps             # a go.mod requires only what its packages import
//
// check serves every module of go.work from a file-based module proxy built
// from the working tree (the layout `go mod download` reads), then, in a
// temporary module outside the repository with GOWORK=off, `go get`s each
// public module at that version and builds every one of its packages, with
// a module cache of its own so no earlier copy of the same version is used.
// It fails when a go.mod has a replace directive, when the modules require
// each other at different versions, or when a module, on its own, compiles a
// dependency at another version than the workspace does (users would build
// with versions the tests never ran).
//
// deps fails when the go.mod of a module users import requires a module
// that only its tests need (see deps.go).
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// corePath is the path of the core module; every module path starts with it.
const corePath = "github.com/idemgo/idem"

// private lists the modules that are not published for users: they hold
// only tests. They are still checked for replace directives and versions.
var private = map[string]bool{corePath + "/integration": true, corePath + "/idemkafka/kafkabench": true}

type module struct {
	Path string
	Dir  string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release check | deps | version vX.Y.Z | proxy DIR | tidy [MODULE_DIR...]")
	}
	mods, err := workspaceModules()
	if err != nil {
		return err
	}
	switch args[0] {
	case "check":
		return check(mods)
	case "version":
		if len(args) != 2 || !semver.MatchString(args[1]) || pseudo.MatchString(args[1]) {
			return errors.New("usage: release version vX.Y.Z")
		}
		if err := setVersion(mods, args[1]); err != nil {
			return err
		}
		if err := check(mods); err != nil {
			return err
		}
		fmt.Println("Tag and push, from the commit that has these go.mod files:")
		for _, m := range mods {
			if !private[m.Path] {
				fmt.Printf("  git tag %s\n", tagName(m, args[1]))
			}
		}
		return nil
	case "tidy":
		return tidy(mods, args[1:])
	case "deps":
		return deps(mods)
	case "proxy":
		if len(args) != 2 {
			return errors.New("usage: release proxy DIR")
		}
		v, err := moduleVersion(mods)
		if err != nil {
			return err
		}
		return writeProxy(mods, v, args[1])
	}
	return fmt.Errorf("unknown verb %q", args[0])
}

// pseudo matches the tail of a pseudo-version (a commit, not a release).
var pseudo = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}$`)

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// tagName is the tag of module m at version v: "v1.2.3" for the core,
// "redisstore/v1.2.3" for a nested module.
func tagName(m module, v string) string {
	if m.Path == corePath {
		return v
	}
	return strings.TrimPrefix(m.Path, corePath+"/") + "/" + v
}

// workspaceModules lists the modules of go.work, the core first.
func workspaceModules() ([]module, error) {
	out, err := goCmd("", nil, "list", "-m", "-json")
	if err != nil {
		return nil, err
	}
	var mods []module
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var m module
		if err := dec.Decode(&m); err != nil {
			return nil, err
		}
		if m.Path != corePath && !strings.HasPrefix(m.Path, corePath+"/") {
			return nil, fmt.Errorf("module %s in go.work is not under %s", m.Path, corePath)
		}
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

type goMod struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

func readGoMod(m module) (goMod, error) {
	out, err := goCmd(m.Dir, nil, "mod", "edit", "-json")
	var gm goMod
	if err == nil {
		err = json.Unmarshal(out, &gm)
	}
	return gm, err
}

// moduleVersion returns the one version at which the modules require each
// other, or an error naming every replace directive and every disagreement.
func moduleVersion(mods []module) (string, error) {
	var problems []string
	seen := map[string][]string{} // version → "module requires path"
	for _, m := range mods {
		gm, err := readGoMod(m)
		if err != nil {
			return "", err
		}
		for _, r := range gm.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod: replace %s => %s: remove it (go.work is for development; a replace in a dependency's go.mod is ignored by users)", rel(m.Dir), r.Old.Path, r.New.Path))
		}
		for _, r := range gm.Require {
			if r.Path == corePath || strings.HasPrefix(r.Path, corePath+"/") {
				seen[r.Version] = append(seen[r.Version], fmt.Sprintf("%s requires %s", m.Path, r.Path))
			}
		}
	}
	versions := slices.Sorted(func(yield func(string) bool) {
		for v := range seen {
			if !yield(v) {
				return
			}
		}
	})
	if len(versions) > 1 {
		for _, v := range versions {
			problems = append(problems, fmt.Sprintf("at %s: %s", v, strings.Join(seen[v], ", ")))
		}
		problems = append(problems, "the modules must require each other at one version: go run ./internal/release version vX.Y.Z")
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "\n  "))
	}
	if len(versions) == 0 {
		return "", errors.New("no module requires another: nothing says which version is being released")
	}
	if !semver.MatchString(versions[0]) || pseudo.MatchString(versions[0]) {
		return "", fmt.Errorf("the modules require each other at %s, which is not a release version", versions[0])
	}
	return versions[0], nil
}

// setVersion makes every module require its siblings at v, and drops the
// replace directives that pointed them at the tree.
func setVersion(mods []module, v string) error {
	for _, m := range mods {
		gm, err := readGoMod(m)
		if err != nil {
			return err
		}
		for _, r := range gm.Replace {
			if r.Old.Path == corePath || strings.HasPrefix(r.Old.Path, corePath+"/") {
				if _, err := goCmd(m.Dir, nil, "mod", "edit", "-dropreplace="+r.Old.Path); err != nil {
					return err
				}
			}
		}
		for _, r := range gm.Require {
			if r.Path == corePath || strings.HasPrefix(r.Path, corePath+"/") {
				if _, err := goCmd(m.Dir, nil, "mod", "edit", "-require="+r.Path+"@"+v); err != nil {
					return err
				}
			}
		}
	}
	return pinWorkspace(mods, v)
}

// pinWorkspace points go.work's replace directives for idem's modules at
// version v to their folders: the workspace then builds from the tree
// without fetching a version that is not published yet.
func pinWorkspace(mods []module, v string) error {
	out, err := goCmd("", nil, "work", "edit", "-json")
	if err != nil {
		return err
	}
	var work struct {
		Replace []struct {
			Old struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &work); err != nil {
		return err
	}
	args := []string{"work", "edit"}
	for _, r := range work.Replace {
		if r.Old.Path == corePath || strings.HasPrefix(r.Old.Path, corePath+"/") {
			args = append(args, "-dropreplace="+r.Old.Path+"@"+r.Old.Version)
		}
	}
	root, err := goCmd("", nil, "env", "GOWORK")
	if err != nil {
		return err
	}
	top := filepath.Dir(strings.TrimSpace(string(root)))
	for _, m := range mods {
		dir, err := filepath.Rel(top, m.Dir)
		if err != nil {
			return err
		}
		args = append(args, "-replace="+m.Path+"@"+v+"=./"+filepath.ToSlash(dir))
	}
	_, err = goCmd(top, nil, args...)
	return err
}

// writeProxy writes a file-based module proxy under dir serving every
// module of the workspace, as its working tree holds it, at version v.
func writeProxy(mods []module, v, dir string) error {
	stamp, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, time.Now().UTC().Truncate(time.Second)})
	for _, m := range mods {
		at := filepath.Join(dir, filepath.FromSlash(m.Path), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		mod, err := os.ReadFile(filepath.Join(m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		files := map[string][]byte{
			v + ".mod":  mod,
			v + ".info": stamp,
			"list":      []byte(v + "\n"),
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(at, name), b, 0o644); err != nil {
				return err
			}
		}
		if err := writeZip(mods, m, v, filepath.Join(at, v+".zip")); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	return nil
}

// writeZip writes module m's zip: the files git tracks or would track
// (untracked ones that are not ignored count, so the working tree is what
// is checked), less those of nested modules, under "path@version/".
func writeZip(mods []module, m module, v, name string) error {
	out, err := exec.Command("git", "-C", m.Dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", ".").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	var nested []string
	for _, o := range mods {
		if o.Dir != m.Dir && strings.HasPrefix(o.Dir, m.Dir+string(filepath.Separator)) {
			nested = append(nested, filepath.ToSlash(strings.TrimPrefix(o.Dir, m.Dir+string(filepath.Separator)))+"/")
		}
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	slices.Sort(files)
	for _, file := range slices.Compact(files) { // a file in a merge is listed once per stage
		if file == "" || file == "go.work" || strings.HasPrefix(file, "vendor/") ||
			slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(file, n) }) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, filepath.FromSlash(file)))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			return err
		}
		w, err := zw.Create(m.Path + "@" + v + "/" + file)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// check is the release check; see the package documentation.
func check(mods []module) error {
	v, err := moduleVersion(mods)
	if err != nil {
		return err
	}
	tmp, env, err := proxyEnv(mods, v)
	if err != nil {
		return err
	}
	defer cleanup(tmp, env)
	workspace, err := buildList("", nil)
	if err != nil {
		return err
	}
	var problems []string
	for _, m := range mods {
		if private[m.Path] {
			continue
		}
		p, err := checkModule(filepath.Join(tmp, "use-"+filepath.Base(m.Dir)), env, m, v, workspace)
		if err != nil {
			return fmt.Errorf("%s@%s: %w", m.Path, v, err)
		}
		problems = append(problems, p...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("dependency versions differ between the workspace and the modules as users get them:\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Printf("release check: every module builds from a module proxy at %s, no replace, versions aligned\n", v)
	return nil
}

// proxyEnv writes the module proxy of the tree at v into a new temporary
// folder and returns it with the environment that builds from it: no
// workspace, idem's modules from that proxy, everything else from the local
// module cache first (no download of what the workspace already has), then
// the configured proxy, and a module cache of its own, so no earlier copy of
// the same version is used. The caller removes it with cleanup.
func proxyEnv(mods []module, v string) (tmp string, env []string, err error) {
	tmp, err = os.MkdirTemp("", "idem-release-")
	if err != nil {
		return "", nil, err
	}
	proxy := filepath.Join(tmp, "proxy")
	if err := writeProxy(mods, v, proxy); err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, err
	}
	out, err := goCmd("", nil, "env", "GOMODCACHE", "GOPROXY")
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, err
	}
	cache, upstream, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	env = []string{
		"GOWORK=off",
		"GOFLAGS=-mod=mod " + os.Getenv("GOFLAGS"),
		"GONOSUMDB=" + corePath,
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(cache, "cache", "download") + "," + upstream,
	}
	return tmp, env, nil
}

func cleanup(tmp string, env []string) {
	_, _ = goCmd(tmp, env, "clean", "-modcache") // its files are read-only
	_ = os.RemoveAll(tmp)
}

// tidy runs go mod tidy in every module as a user's build sees it (outside
// the workspace, idem's modules from the tree's proxy), then drops the
// checksums of idem's own modules from each go.sum: they change with every
// commit and only a user's own go.sum needs them.
func tidy(mods []module, only []string) error {
	v, err := moduleVersion(mods)
	if err != nil {
		return err
	}
	tmp, env, err := proxyEnv(mods, v)
	if err != nil {
		return err
	}
	defer cleanup(tmp, env)
	for _, m := range mods {
		if !selected(m, only) {
			continue
		}
		if _, err := goCmd(m.Dir, env, "mod", "tidy"); err != nil {
			return err
		}
		sum := filepath.Join(m.Dir, "go.sum")
		b, err := os.ReadFile(sum)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var kept []string
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if !strings.HasPrefix(line, corePath+" ") && !strings.HasPrefix(line, corePath+"/") {
				kept = append(kept, line)
			}
		}
		if err := os.WriteFile(sum, []byte(strings.Join(kept, "")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// selected reports whether m is among the module directories dirs (all
// modules when dirs is empty), given as paths from the current directory.
func selected(m module, dirs []string) bool {
	if len(dirs) == 0 {
		return true
	}
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil && abs == m.Dir {
			return true
		}
	}
	return false
}

// checkModule gets module m at v into a new module in dir, builds all of its
// packages, and compares the versions it resolves with the workspace's.
func checkModule(dir string, env []string, m module, v string, workspace map[string]string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/use\n\ngo 1.26.0\n"), 0o644); err != nil {
		return nil, err
	}
	if _, err := goCmd(dir, env, "get", m.Path+"@"+v); err != nil {
		return nil, err
	}
	// Every package of the module, as a user's build would compile it
	// (internal packages come along with the packages that import them).
	out, err := goCmd(dir, env, "list", "-e", "-f", "{{.ImportPath}} {{.Name}}", m.Path+"/...")
	if err != nil {
		return nil, err
	}
	var imports, mains []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, name, _ := strings.Cut(line, " ")
		switch {
		case strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal"):
		case name == "main":
			mains = append(mains, path)
		default:
			imports = append(imports, path)
		}
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		return nil, err
	}
	if _, err := goCmd(dir, env, "mod", "tidy"); err != nil {
		return nil, err
	}
	for _, p := range append([]string{"."}, mains...) { // one at a time: -o names one output
		if _, err := goCmd(dir, env, "build", "-o", os.DevNull, p); err != nil {
			return nil, err
		}
	}
	// The modules whose code the user's build compiles: those must be the
	// versions the workspace tests ran.
	out, err = goCmd(dir, env, append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "."}, mains...)...)
	if err != nil {
		return nil, err
	}
	alone := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, v, ok := strings.Cut(line, " "); ok && v != "" {
			alone[path] = v
		}
	}
	var problems []string
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range alone {
			if !yield(p) {
				return
			}
		}
	}) {
		if w, ok := workspace[path]; ok && w != alone[path] && !strings.HasPrefix(path, corePath) {
			problems = append(problems, fmt.Sprintf("%s resolves %s@%s on its own, %s in the workspace: (cd %s && go get %s@%s)",
				m.Path, path, alone[path], w, rel(m.Dir), path, w))
		}
	}
	return problems, nil
}

// buildList returns the module versions of the build in dir: path → version.
func buildList(dir string, env []string) (map[string]string, error) {
	out, err := goCmd(dir, env, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, v, ok := strings.Cut(line, " "); ok && v != "" {
			m[path] = v
		}
	}
	return m, nil
}

func goCmd(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// rel returns dir relative to the working directory, for a command to copy.
func rel(dir string) string {
	wd, _ := os.Getwd()
	if r, err := filepath.Rel(wd, dir); err == nil {
		return r
	}
	return dir
}
