package test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the repository's root: the test runs in test/.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above the test package: %v", err)
	}
	return root
}

// docs/layout.md lists every package of the module once with its layer,
// every import between the module's packages runs to a lower layer, and
// every package says in its package comment what it holds: the page is
// the one description of the layout, and it cannot drift from the code.
func TestLayoutDocumentMatchesTheModule(t *testing.T) {
	root := moduleRoot(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list the module's packages")
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (\\d+) \\| `([^`]+)` \\| (.+) \\|$")
	layer := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(string(page), -1) {
		n, _ := strconv.Atoi(m[1])
		if _, dup := layer[m[2]]; dup {
			t.Errorf("docs/layout.md lists %s twice", m[2])
		}
		layer[m[2]] = n
	}
	if len(layer) == 0 {
		t.Fatal("docs/layout.md has no package rows")
	}

	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath, Doc string
		Imports         []string
	}
	const module = "herd"
	rel := func(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }
	listed := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := rel(p.ImportPath)
		listed[name] = true
		own, ok := layer[name]
		if !ok {
			t.Errorf("package %s is not in docs/layout.md", name)
			continue
		}
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("package %s has no package comment saying what it holds", name)
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if l, ok := layer[rel(imp)]; ok && l >= own {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports run to lower layers only", name, own, rel(imp), l)
			}
		}
	}
	for name := range layer {
		if !listed[name] {
			t.Errorf("docs/layout.md lists %s, which is not a package of the module", name)
		}
	}
}

// Every Go or Markdown file a document or a Go comment names
// exists, relative to the repository's root or to the naming file's
// directory: a file that moves takes its mentions along.
func TestNamedFilesExist(t *testing.T) {
	root := moduleRoot(t)
	ref := regexp.MustCompile(`(?:^|[^\w/.-])((?:[\w-]+/)*[\w-]+\.(?:go|md))\b`)
	comment := regexp.MustCompile(`//[^\n]*`)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		isGo, isMD := strings.HasSuffix(path, ".go"), strings.HasSuffix(path, ".md")
		if !isGo && !isMD {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if isGo {
			text = strings.Join(comment.FindAllString(text, -1), "\n")
		}
		dir := filepath.Dir(path)
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			name := m[1]
			checked++
			if exists(filepath.Join(root, name)) || exists(filepath.Join(dir, name)) {
				continue
			}
			r, _ := filepath.Rel(root, path)
			t.Errorf("%s names %s, which does not exist", r, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no file names to check")
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }
