package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"herd/fsm"
	"herd/internal/version"
)

// dataFormatFile, in a server's data directory, records the newest build
// that opened it and the command forms that build writes. A build that
// reads older forms refuses to start on it: its replica would refuse the
// entries in the log (and the snapshots) the newer build wrote, and its
// state would fall behind the others' without a word. A downgrade takes
// the backup made before the upgrade, restored into a fresh directory.
const dataFormatFile = "herd-format.json"

// dataFormat is the record in dataFormatFile.
type dataFormat struct {
	Version      string `json:"version"`
	CommandForms int    `json:"command_forms"`
}

// checkDataFormat refuses a data directory a build reading newer command
// forms wrote, and records this build's otherwise (keeping a newer
// build's version when the forms are the same).
func checkDataFormat(dir string) error {
	path := filepath.Join(dir, dataFormatFile)
	have := dataFormat{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", path, err)
	default:
		if err := json.Unmarshal(b, &have); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if have.CommandForms > fsm.CommandForms {
		return fmt.Errorf("data directory %s was written by herd %s, which writes command forms %d; this build (%s) reads forms up to %d: "+
			"run herd %s or newer on it, or restore the backup taken before the upgrade into a fresh data directory",
			dir, have.Version, have.CommandForms, version.Version(), fsm.CommandForms, have.Version)
	}
	want := dataFormat{Version: version.Version(), CommandForms: fsm.CommandForms}
	if have.CommandForms == want.CommandForms && version.Compare(have.Version, want.Version) > 0 {
		want.Version = have.Version
	}
	if want == have {
		return nil
	}
	out, _ := json.Marshal(want)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o640); err != nil {
		return fmt.Errorf("record the data format: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("record the data format: %w", err)
	}
	return nil
}
