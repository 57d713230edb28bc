package main

import (
	"strings"
	"testing"
)

func TestOutputTemplate(t *testing.T) {
	answer := map[string]any{
		"next": nil,
		"tasks": []any{
			map[string]any{"id": "t1", "spec": map[string]any{"priority": 70.0, "command": []any{"true"}}},
			map[string]any{"id": "t2", "spec": map[string]any{"priority": 50.0, "command": []any{"sh", "-c", "x"}}},
		},
	}
	for text, want := range map[string]string{
		`{{range .tasks}}{{.id}} {{.spec.priority}}\n{{end}}`: "t1 70\nt2 50\n",
		`{{range .tasks}}{{.spec.command}};{{end}}`:           `["true"];["sh","-c","x"];`,
		`next={{.next}}`: "next=",
		`{{range .tasks}}{{range .spec.command}}[{{.}}]{{end}}{{end}}`: "[true][sh][-c][x]",
	} {
		tmpl, err := parseTemplate(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var out strings.Builder
		if err := tmpl.fill(&out, answer); err != nil || out.String() != want {
			t.Errorf("%s: %q, %v; want %q", text, out.String(), err, want)
		}
	}
	for _, bad := range []string{"{{range .tasks}}x", "x{{end}}", "{{.id", "{{id}}", "{{.a b}}"} {
		if _, err := parseTemplate(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for text, want := range map[string]string{"{{.missing}}": ".missing: no such field", "{{range .next.x}}{{end}}": ".next: not an object", "{{range .tasks.0}}{{end}}": ".tasks: not an object"} {
		tmpl, err := parseTemplate(text)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := tmpl.fill(&out, answer); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}
