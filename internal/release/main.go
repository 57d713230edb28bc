// Command release builds herd's release binaries: static (CGO_ENABLED=0),
// reproducible (-trimpath, no build id, the commit's own time as the
// build date) binaries for the machines herd's sites run, linux/amd64,
// linux/arm64 and linux/arm (v7), each stamped with its version, commit
// and date, and a SHA256SUMS file beside them.
//
//	go run ./internal/release -version 0.1.0 -out dist
//
// Without -version the version is the tag on HEAD (vX.Y.Z), and a tree
// with no such tag is refused: a release is built from a tagged commit.
// -check builds every target into a temporary directory and removes it,
// to prove that the cross-builds compile.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// target is one platform a release is built for.
type target struct{ goos, goarch, goarm string }

func (t target) name() string {
	if t.goarm != "" {
		return t.goos + "-" + t.goarch + "v" + t.goarm
	}
	return t.goos + "-" + t.goarch
}

// targets are the mini PCs (amd64) and the ARM boards (Raspberry Pi 3
// and newer in 64-bit and 32-bit systems) of herd's sites.
var targets = []target{{"linux", "amd64", ""}, {"linux", "arm64", ""}, {"linux", "arm", "7"}}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	ver := fs.String("version", "", "the version to stamp (default: the vX.Y.Z tag on HEAD)")
	out := fs.String("out", "dist", "where to write the binaries and SHA256SUMS")
	check := fs.Bool("check", false, "build every target into a temporary directory and remove it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	date, err := git("show", "-s", "--format=%cI", "HEAD")
	if err != nil {
		return err
	}
	v := strings.TrimPrefix(*ver, "v")
	if v == "" && *check {
		v = "0.0.0-check"
	}
	if v == "" {
		tag, err := git("describe", "--tags", "--exact-match", "--match", "v[0-9]*", "HEAD")
		if err != nil {
			return errors.New("HEAD has no vX.Y.Z tag: tag the release commit, or say -version")
		}
		v = strings.TrimPrefix(tag, "v")
	}
	if !validVersion(v) {
		return fmt.Errorf("version %q is not MAJOR.MINOR.PATCH[-PRE]", v)
	}
	dir := *out
	if *check {
		if dir, err = os.MkdirTemp("", "herd-release-check-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var sums strings.Builder
	for _, t := range targets {
		name := fmt.Sprintf("herd-%s-%s", v, t.name())
		path := filepath.Join(dir, name)
		if err := build(t, path, ldflags(v, commit, date)); err != nil {
			return fmt.Errorf("%s: %w", t.name(), err)
		}
		sum, size, err := fileSum(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
		fmt.Fprintf(stdout, "%-40s %6.1f MiB  sha256 %s\n", name, float64(size)/(1<<20), sum)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	if *check {
		fmt.Fprintf(stdout, "every target builds (%d)\n", len(targets))
	}
	return nil
}

// ldflags stamps the version, commit and date into internal/version, and
// strips the symbol table and the build id (which would differ between
// two builds of the same tree).
func ldflags(v, commit, date string) string {
	const pkg = "herd/internal/version"
	return fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.commit=%s -X %s.date=%s", pkg, v, pkg, commit, pkg, date)
}

// build compiles cmd/herd for t into path.
func build(t target, path, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", path, "./cmd/herd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.goos, "GOARCH="+t.goarch, "GOARM="+t.goarm, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func fileSum(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// validVersion accepts MAJOR.MINOR.PATCH with an optional -PRE.
func validVersion(v string) bool {
	core, _, _ := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
