package config

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sample is a value of the setting's kind other than its default, as
// text and as the HCL expression for it.
func sample(s Setting[Server]) (text, hclExpr string) {
	var c Server
	switch s.field(&c).(type) {
	case *string:
		return "x1", `"x1"`
	case *bool:
		return "true", "true"
	case *int, *int64, *uint64:
		return "7", "7"
	case *float64:
		return "3.5", "3.5"
	case *time.Duration:
		return "7s", `"7s"`
	case *[]string:
		return "a:1,b:2", `["a:1", "b:2"]`
	}
	panic(fmt.Sprintf("no sample for %s", s.Name))
}

// Every setting can be given in the file, and through its variable and
// its flag where it has them, and each way sets that setting only.
func TestEverySettingIsSettableEveryWay(t *testing.T) {
	for _, s := range ServerSettings.Settings {
		text, expr := sample(s)
		check := func(how string, c Server) {
			t.Helper()
			if got := s.Value(&c); got != text {
				t.Errorf("%s through %s: reads %q, want %q", s.Name, how, got, text)
			}
			d := DefaultServer()
			for _, other := range ServerSettings.Settings {
				if other.Name != s.Name && other.Value(&c) != other.Value(&d) {
					t.Errorf("%s through %s also changed %s", s.Name, how, other.Name)
				}
			}
		}
		src := s.Name + " = " + expr
		if block, name, ok := strings.Cut(s.Name, "."); ok {
			src = block + " {\n  " + name + " = " + expr + "\n}\n"
		}
		c := DefaultServer()
		if err := ParseServer(&c, "t.hcl", []byte(src)); err != nil {
			t.Errorf("%s in a file: %v", s.Name, err)
		}
		check("the file", c)
		if s.Env != "" {
			c = DefaultServer()
			if err := ApplyServerEnv(&c, func(k string) (string, bool) { return text, k == s.Env }); err != nil {
				t.Errorf("%s: %v", s.Env, err)
			}
			check(s.Env, c)
		}
		if s.Flag != "" {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			apply := ServerSettings.BindFlags(fs)
			if err := fs.Parse([]string{"-" + s.Flag + "=" + text}); err != nil {
				t.Errorf("-%s: %v", s.Flag, err)
				continue
			}
			c = DefaultServer()
			if err := apply(&c); err != nil {
				t.Errorf("-%s: %v", s.Flag, err)
			}
			check("-"+s.Flag, c)
		}
	}
}

// Names, variables and flags are each used once.
func TestSettingNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	for _, s := range ServerSettings.Settings {
		for _, key := range []string{"name " + s.Name, "env " + s.Env, "flag " + s.Flag} {
			if strings.HasSuffix(key, " ") {
				continue
			}
			if prev, dup := seen[key]; dup {
				t.Errorf("%s used by %s and %s", key, prev, s.Name)
			}
			seen[key] = s.Name
		}
	}
}

// Flags not given leave the file's and the environment's values alone;
// a bad value is an error naming the flag.
func TestOnlyGivenFlagsApply(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	apply := ServerSettings.BindFlags(fs)
	if err := fs.Parse([]string{"-id", "s9"}); err != nil {
		t.Fatal(err)
	}
	c := DefaultServer()
	c.HTTPAddr = "from-file:1"
	if err := apply(&c); err != nil || c.ID != "s9" || c.HTTPAddr != "from-file:1" {
		t.Fatalf("flags applied %+v (%v)", c, err)
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	ServerSettings.BindFlags(fs)
	if err := fs.Parse([]string{"-bootstrap-expect", "three"}); err == nil || !strings.Contains(err.Error(), "bootstrap-expect") {
		t.Fatalf("a bad number: %v", err)
	}
}

// A block given twice is refused rather than half-applied.
func TestDuplicateBlockIsAnError(t *testing.T) {
	c := DefaultServer()
	err := ParseServer(&c, "t.hcl", []byte("raft {\n}\nraft {\n}\n"))
	if err == nil || !strings.Contains(err.Error(), "second raft block") {
		t.Fatalf("got %v", err)
	}
}
