// Package version tells which build of herd is running: its semantic
// version (set at release by the linker, 0.2.0-dev otherwise), the
// commit and time it was built from, and the Go release that built it;
// and compares versions, so that servers and agents can tell a newer peer
// from an older one during a rolling upgrade.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Set by the release build: go build -ldflags "-X herd/internal/version.version=0.1.0
// -X herd/internal/version.commit=... -X herd/internal/version.date=...".
var (
	version = "0.2.0-dev"
	commit  = ""
	date    = ""
)

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	BuildDate string `json:"build_date,omitempty"`
	GoVersion string `json:"go_version"`
}

// Get returns this build's identity. Without the release build's
// values, the commit and date come from the Go toolchain's record of
// the version control state (absent from go run and go test builds).
func Get() Info {
	info := Info{Version: version, Commit: commit, BuildDate: date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				if info.BuildDate == "" {
					info.BuildDate = s.Value
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	return info
}

// Version is this build's semantic version, without a leading v.
func Version() string { return version }

// String is the build's identity on one line.
func (i Info) String() string {
	s := "herd " + i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (" + c
		if i.Modified {
			s += ", modified"
		}
		s += ")"
	}
	if i.BuildDate != "" {
		s += " built " + i.BuildDate
	}
	return s + " with " + i.GoVersion
}

// semver is a parsed version: major, minor, patch and an optional
// pre-release, which sorts before the release it precedes.
type semver struct {
	n   [3]int
	pre string
}

func parse(v string) (semver, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	v, _, _ = strings.Cut(v, "+") // build metadata does not order
	core, pre, _ := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
	}
	var s semver
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
		}
		s.n[i] = n
	}
	s.pre = pre
	return s, nil
}

// Compare orders two versions: -1 when a is older than b, 0 when they
// are the same release, 1 when a is newer. A pre-release sorts before
// its release ("0.2.0-dev" < "0.2.0"), and pre-releases of one release
// are ordered by their text. An unparsable version (an empty one, from
// a peer too old to say) is older than any other.
func Compare(a, b string) int {
	sa, ea := parse(a)
	sb, eb := parse(b)
	switch {
	case ea != nil && eb != nil:
		return 0
	case ea != nil:
		return -1
	case eb != nil:
		return 1
	}
	for i := range sa.n {
		if sa.n[i] != sb.n[i] {
			if sa.n[i] < sb.n[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case sa.pre == sb.pre:
		return 0
	case sa.pre == "":
		return 1
	case sb.pre == "":
		return -1
	case sa.pre < sb.pre:
		return -1
	}
	return 1
}

// Valid reports whether v is a semantic version herd can compare.
func Valid(v string) bool { _, err := parse(v); return err == nil }
