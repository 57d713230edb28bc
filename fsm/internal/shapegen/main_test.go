package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestGeneratedIsCurrent: fsm/shape_gen.go is what spec.Task generates,
// so a field added to the spec without `go generate ./fsm` fails here.
func TestGeneratedIsCurrent(t *testing.T) {
	src, err := os.ReadFile("../../../spec/task.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Generate(src)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../shape_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatal("fsm/shape_gen.go is stale: run go generate ./fsm")
	}
}

// TestNewFieldIsGenerated: a field added to spec.Task appears in every
// generated piece (the type, both conversions, the encoding, the decoding
// and the sharing), and a type the generator cannot map is refused by
// name.
func TestNewFieldIsGenerated(t *testing.T) {
	src, err := os.ReadFile("../../../spec/task.go")
	if err != nil {
		t.Fatal(err)
	}
	withField := strings.Replace(string(src), "type Task struct {\n", "type Task struct {\n\tQueue string `json:\"queue,omitempty\"`\n", 1)
	out, err := Generate([]byte(withField))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Queue string `json:\"queue,omitempty\"`", "Queue: in.Queue", "out.Queue = s.Queue",
		"buf = appendString(buf, s.Queue)", "s.Queue = d.string()", "c.Queue = internString(c.Queue)",
	} {
		if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("generated source lacks %q", want)
		}
	}
	bad := strings.Replace(string(src), "type Task struct {\n", "type Task struct {\n\tWhen float64 `json:\"when\"`\n", 1)
	if _, err := Generate([]byte(bad)); err == nil || !strings.Contains(err.Error(), "When") {
		t.Fatalf("an unmapped type: err = %v, want one naming the field", err)
	}
	noTag := strings.Replace(string(src), "type Task struct {\n", "type Task struct {\n\tQueue string\n", 1)
	if _, err := Generate([]byte(noTag)); err == nil {
		t.Fatal("a field without a JSON tag was accepted")
	}
}
