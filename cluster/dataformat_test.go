package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herd/fsm"
	"herd/internal/version"
)

// A data directory records the build that opened it; one that a build
// writing newer command forms opened is refused with what to do, and is
// left as it was.
func TestDataFormatRefusesADirectoryOfNewerForms(t *testing.T) {
	dir := t.TempDir()
	if err := checkDataFormat(dir); err != nil {
		t.Fatal(err)
	}
	var got dataFormat
	b, _ := os.ReadFile(filepath.Join(dir, dataFormatFile))
	if err := json.Unmarshal(b, &got); err != nil || got != (dataFormat{Version: version.Version(), CommandForms: fsm.CommandForms}) {
		t.Fatalf("recorded %s (%v)", b, err)
	}
	newer, _ := json.Marshal(dataFormat{Version: "9.0.0", CommandForms: fsm.CommandForms + 1})
	if err := os.WriteFile(filepath.Join(dir, dataFormatFile), newer, 0o640); err != nil {
		t.Fatal(err)
	}
	err := checkDataFormat(dir)
	if err == nil || !strings.Contains(err.Error(), "written by herd 9.0.0") || !strings.Contains(err.Error(), "restore the backup") {
		t.Fatalf("a directory of newer forms: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, dataFormatFile)); string(b) != string(newer) {
		t.Fatalf("the refused directory's record changed: %s", b)
	}
	// A newer build of the same forms may be replaced by this one: its
	// version stays recorded as the newest that opened the directory.
	same, _ := json.Marshal(dataFormat{Version: "9.0.0", CommandForms: fsm.CommandForms})
	if err := os.WriteFile(filepath.Join(dir, dataFormatFile), same, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := checkDataFormat(dir); err != nil {
		t.Fatalf("a newer build of the same forms: %v", err)
	}
}
