package agent

import (
	"io"
	"os"
	"path/filepath"
	"sync"
)

// workDirs reuses attempts' working directories. Making one is a
// metadata write that a slow disk charges dearly for (on the build
// machine up to a millisecond of kernel CPU, a fifth of a busy agent's
// work), while a directory the last attempt left empty, with none of its
// processes left to write into it, serves the next attempt as well as a
// new one. A directory an attempt left files in is kept under that
// attempt's id, for the retention, as before.
type workDirs struct {
	root string // DATA_DIR/work

	mu     sync.Mutex
	idle   []string        // empty, ready for an attempt
	pooled map[string]bool // base names of the idle and lent directories
}

// workDirsIdleMax bounds the idle directories kept.
const workDirsIdleMax = 64

func newWorkDirs(root string) *workDirs {
	return &workDirs{root: root, pooled: map[string]bool{}}
}

// take returns an empty directory for the attempt id: an idle one, or a
// new work/<id>.
func (w *workDirs) take(id string) (string, error) {
	w.mu.Lock()
	for len(w.idle) > 0 {
		dir := w.idle[len(w.idle)-1]
		w.idle = w.idle[:len(w.idle)-1]
		w.mu.Unlock()
		if emptyDir(dir) {
			return dir, nil
		}
		// Written into while idle, or removed: not lent again.
		w.mu.Lock()
		delete(w.pooled, filepath.Base(dir))
	}
	dir := filepath.Join(w.root, id)
	w.pooled[id] = true
	w.mu.Unlock()
	if err := ensureDir(dir); err != nil {
		w.forget(dir)
		return "", err
	}
	return dir, nil
}

// give takes back the directory of the attempt id once it ended. With
// no process of the attempt left (contained), an empty directory goes
// back to the pool and one holding files is renamed work/<id>; otherwise
// the directory stays as it is, out of the pool, for the janitor.
func (w *workDirs) give(dir, id string, contained bool) {
	if contained && emptyDir(dir) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.idle) < workDirsIdleMax {
			w.idle = append(w.idle, dir)
			return
		}
		delete(w.pooled, filepath.Base(dir))
		return
	}
	w.forget(dir)
	if contained && filepath.Base(dir) != id {
		_ = os.Rename(dir, filepath.Join(w.root, id))
	}
}

func (w *workDirs) forget(dir string) {
	w.mu.Lock()
	delete(w.pooled, filepath.Base(dir))
	w.mu.Unlock()
}

// inPool tells the janitor to leave a directory alone: an idle one may
// be old and empty, a lent one is some attempt's working directory.
func (w *workDirs) inPool(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pooled[name]
}

// emptyDir reports whether dir exists and holds nothing.
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err == io.EOF
}
