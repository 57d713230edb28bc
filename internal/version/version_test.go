package version

import (
	"strings"
	"testing"
)

func TestCompareOrdersReleasesAndPreReleases(t *testing.T) {
	ordered := []string{"", "0.1.0-dev", "0.1.0", "v0.1.1", "0.2.0-alpha", "0.2.0-beta", "0.2.0", "0.10.0", "1.0.0"}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := Compare(a, b); got != want {
				t.Errorf("Compare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	if Compare("0.1.0+abc", "0.1.0") != 0 {
		t.Error("build metadata changed the order")
	}
	for _, bad := range []string{"", "1", "1.2", "1.2.x", "a.b.c", "1.-2.3"} {
		if Valid(bad) {
			t.Errorf("%q is valid", bad)
		}
	}
}

func TestGetSaysVersionAndGo(t *testing.T) {
	i := Get()
	if i.Version != Version() || !Valid(i.Version) || !strings.HasPrefix(i.GoVersion, "go") {
		t.Fatalf("%+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "herd "+i.Version) || !strings.Contains(s, i.GoVersion) {
		t.Fatalf("%q", s)
	}
}
