package agent

import (
	"os"
	"path/filepath"
	"sync"
	"time"
)

// workDirs reuses attempts' working directories. Making one is a
// metadata write that a slow disk charges dearly for, while a directory
// the last attempt left empty, with none of its processes left to write
// into it, serves the next attempt as well as a new one. A directory an
// attempt left files in is kept under that attempt's id, for the
// retention.
type workDirs struct {
	root string // DATA_DIR/work

	mu     sync.Mutex
	idle   []idleDir       // empty, ready for an attempt
	pooled map[string]bool // base names of the idle and lent directories
}

// idleDir is a directory seen empty when it was given back. An entry made
// or removed in it since changes its modification time, so when that time
// was already settled then (older than a tick of the file system's clock,
// which may stamp coarsely), one stat tells whether it is still empty;
// otherwise it is read again. So a directory lent is not opened and read
// each time, and nothing but a stray process or an operator writes into
// an idle one anyway.
type idleDir struct {
	path    string
	emptyAt time.Time // its modification time, if settled; zero: unknown
}

// mtimeSettled is longer than any file system's timestamp granularity.
const mtimeSettled = 100 * time.Millisecond

// idleIfEmpty returns dir as an idleDir if it holds nothing. It stats
// first: a time taken after the check could hide an entry made between.
func idleIfEmpty(dir string) (idleDir, bool) {
	fi, err := os.Stat(dir)
	if err != nil || !emptyDir(dir) {
		return idleDir{}, false
	}
	d := idleDir{path: dir}
	if time.Since(fi.ModTime()) > mtimeSettled {
		d.emptyAt = fi.ModTime()
	}
	return d, true
}

// stillEmpty reports whether d holds nothing, as when it was given back.
func (d idleDir) stillEmpty() bool {
	if d.emptyAt.IsZero() {
		return emptyDir(d.path)
	}
	fi, err := os.Stat(d.path)
	if err != nil || !fi.IsDir() {
		return false
	}
	return fi.ModTime().Equal(d.emptyAt) || emptyDir(d.path)
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
		d := w.idle[len(w.idle)-1]
		w.idle = w.idle[:len(w.idle)-1]
		w.mu.Unlock()
		if d.stillEmpty() {
			return d.path, nil
		}
		// Written into while idle, or removed: not lent again.
		w.mu.Lock()
		delete(w.pooled, filepath.Base(d.path))
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
	if contained {
		if d, ok := idleIfEmpty(dir); ok {
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.idle) < workDirsIdleMax {
				w.idle = append(w.idle, d)
				return
			}
			delete(w.pooled, filepath.Base(dir))
			return
		}
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
