package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// rotatingFile writes an attempt's output to path, moving it to path.1
// (and older ones to path.2, …) once it reaches maxBytes, keeping
// maxFiles rotated files.
type rotatingFile struct {
	path     string
	maxBytes int64
	maxFiles int
	f        *os.File
	size     int64
}

// ensureDir creates dir, and its parents only when they are missing: an
// attempt's directories go where their parents almost always exist, and
// MkdirAll's stat of each level cost as much as the mkdir itself.
func ensureDir(dir string) error {
	err := os.Mkdir(dir, 0o750)
	switch {
	case err == nil || errors.Is(err, fs.ErrExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o750)
	}
	return err
}

func openRotating(path string, maxBytes int64, maxFiles int) (*rotatingFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if errors.Is(err, fs.ErrNotExist) {
		if err := ensureDir(filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
		f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	}
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	st, _ := f.Stat()
	r := &rotatingFile{path: path, maxBytes: maxBytes, maxFiles: maxFiles, f: f}
	if st != nil {
		r.size = st.Size()
	}
	return r, nil
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	if r.size+int64(len(p)) > r.maxBytes && r.size > 0 {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("close log: %w", err)
	}
	for i := r.maxFiles - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1))
	}
	_ = os.Remove(fmt.Sprintf("%s.%d", r.path, r.maxFiles+1))
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("reopen log: %w", err)
	}
	r.f, r.size = f, 0
	return nil
}

func (r *rotatingFile) Close() error { return r.f.Close() }

// attemptLog is an attempt's log file, created on the first line written
// to it: an attempt that prints nothing and succeeds leaves no file (a
// file creation is a metadata write, dear on a slow disk, for nothing the
// timeline does not already hold: the attempt's start and end). The file
// starts with the header herd wrote when the attempt began. A failure to
// create or write the file is kept for Err and further output is dropped,
// so the task never blocks on a full pipe because of its log.
type attemptLog struct {
	path     string
	maxBytes int64
	maxFiles int
	header   string
	f        *rotatingFile
	err      error
}

func newAttemptLog(path string, maxBytes int64, maxFiles int, header string) *attemptLog {
	return &attemptLog{path: path, maxBytes: maxBytes, maxFiles: maxFiles, header: header}
}

func (l *attemptLog) Write(p []byte) (int, error) {
	if l.err != nil {
		return len(p), nil
	}
	if l.f == nil {
		if l.f, l.err = openRotating(l.path, l.maxBytes, l.maxFiles); l.err != nil {
			return len(p), nil
		}
		if _, l.err = l.f.Write([]byte(l.header)); l.err != nil {
			return len(p), nil
		}
	}
	if _, err := l.f.Write(p); err != nil {
		l.err = fmt.Errorf("write log: %w", err)
	}
	return len(p), nil
}

// Note writes a line of herd's own about the attempt, but only to a log
// that exists already, unless force says the line must be kept anyway
// (the attempt failed, or its limits were not applied).
func (l *attemptLog) Note(line string, force bool) {
	if l.f != nil || force {
		_, _ = l.Write([]byte(line))
	}
}

// Err is the first failure to create or write the file, if any.
func (l *attemptLog) Err() error { return l.err }

func (l *attemptLog) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// pruneOld removes each entry directly under dir (an attempt's work
// directory, a task's log directory) whose newest file was last modified
// before cutoff, unless keep says it is still in use. It returns how many
// entries it removed.
func pruneOld(dir string, cutoff time.Time, keep func(name string) bool) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		if keep != nil && keep(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		newest := time.Time{}
		_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if info, err := d.Info(); err == nil && info.ModTime().After(newest) {
				newest = info.ModTime()
			}
			return nil
		})
		if newest.Before(cutoff) && os.RemoveAll(path) == nil {
			removed++
		}
	}
	return removed
}
