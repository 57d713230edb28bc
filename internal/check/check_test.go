package check

import (
	"errors"
	"strings"
	"testing"
)

func TestID(t *testing.T) {
	for _, ok := range []string{"a", "s1", "edge-1.zone_b", strings.Repeat("x", 64), "01kbtask"} {
		if !ID(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "a b", "a/b", "..", strings.Repeat("x", 65), "ä"} {
		if ID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestJoinSorted(t *testing.T) {
	if JoinSorted(nil) != nil {
		t.Fatal("no errors must join to nil")
	}
	err := JoinSorted([]error{errors.New("b"), errors.New("a"), errors.New("c")})
	if err == nil || err.Error() != "a; b; c" {
		t.Fatalf("got %v", err)
	}
}

func TestRef(t *testing.T) {
	long := strings.Repeat("j", 64)
	for _, ok := range []string{"a", "nightly@1765000000", "nightly@1765000000.0.3", "nightly@1765000000.1.0.2", long + ".0.1", long + "@1765000000.2.0"} {
		if !Ref(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "@1", "a@", "a@x", "a@1@2", "a/b", "a@1.x", "a b", long + "x"} {
		if Ref(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDatasetName(t *testing.T) {
	for name, ok := range map[string]bool{
		"frames": true, "out.tar": true, "a:b": true, strings.Repeat("x", MaxDatasetNameBytes): true,
		"": false, ".": false, "..": false, "a/b": false, "a=b": false, "a b": false, "a\x00": false, strings.Repeat("x", MaxDatasetNameBytes+1): false,
	} {
		if err := DatasetName(name); (err == nil) != ok {
			t.Errorf("DatasetName(%q) = %v", name, err)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	type inner struct {
		CPUMillis int64 `json:"cpu_millis"`
	}
	type outer struct {
		Command   []string `json:"command"`
		Resources inner    `json:"resources"`
		Skip      string   `json:"-"`
	}
	fields := JSONFields(outer{})
	if strings.Join(fields, ",") != "command,cpu_millis,resources" {
		t.Fatalf("fields %q", fields)
	}
	for unknown, want := range map[string]string{
		`cpu_milis`: ` (did you mean "cpu_millis"?)`, `comand`: ` (did you mean "command"?)`, `resourcesx`: ` (did you mean "resources"?)`,
		`colour`: ``, `cpu`: ``,
	} {
		if got := DidYouMean(unknown, fields); got != want {
			t.Errorf("DidYouMean(%q) = %q, want %q", unknown, got, want)
		}
	}
}
