package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// handleLog serves an attempt's log as this agent keeps it (its rotated
// files, oldest first, then the current one): GET /v1/logs/{attempt},
// with tail=N for the last N bytes only, and follow=true to keep the
// answer open while the attempt runs here, sending what it writes as it
// writes it. A log this node never wrote, or has removed (after
// log_retention), is a 404 that says so.
func (a *Agent) handleLog(w http.ResponseWriter, r *http.Request) {
	attempt := r.PathValue("attempt")
	if attempt == "" || strings.ContainsAny(attempt, "/\\") || attempt == "." || attempt == ".." {
		http.Error(w, "attempt id is required", http.StatusBadRequest)
		return
	}
	var tail int64
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("tail %q must be a number of bytes", v), http.StatusBadRequest)
			return
		}
		tail = n
	}
	follow := r.URL.Query().Get("follow") == "true"
	path := filepath.Join(a.cfg.DataDir, "logs", attempt+".log")
	files := logFiles(path, a.cfg.LogMaxFiles)
	if len(files) == 0 && !(follow && a.isRunning(attempt)) {
		http.Error(w, fmt.Sprintf("node %s holds no log of attempt %s: it printed nothing, or its log was removed after %s", a.cfg.ID, attempt, a.cfg.LogRetention), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	var total int64
	for _, f := range files {
		if info, err := os.Stat(f); err == nil {
			total += info.Size()
		}
	}
	skip := int64(0)
	if tail > 0 && total > tail {
		skip = total - tail
	}
	// Everything but the current file, which a follow keeps reading.
	for _, f := range files {
		if f == path {
			break
		}
		skip = copySkipping(w, f, skip)
	}
	cur, err := os.Open(path)
	for errors.Is(err, fs.ErrNotExist) && follow && a.isRunning(attempt) {
		// Not written to yet: it appears with the attempt's first output.
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		cur, err = os.Open(path)
	}
	if err != nil {
		return
	}
	defer func() { cur.Close() }()
	if skip > 0 {
		if _, err := cur.Seek(skip, io.SeekStart); err != nil {
			return
		}
	}
	for {
		if _, err := io.Copy(w, cur); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		running := a.isRunning(attempt)
		if !follow || !running {
			if follow {
				_, _ = io.Copy(w, cur) // what it wrote as it ended
			}
			return
		}
		// The file rotated: finish the old one (done above), go on with
		// the new.
		if st, err := os.Stat(path); err == nil {
			if held, err := cur.Stat(); err == nil && !os.SameFile(st, held) {
				next, err := os.Open(path)
				if err == nil {
					cur.Close()
					cur = next
					continue
				}
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logFiles lists an attempt's log files that exist, oldest first.
func logFiles(path string, maxFiles int) []string {
	var out []string
	for i := maxFiles + 1; i >= 1; i-- {
		if p := fmt.Sprintf("%s.%d", path, i); fileExists(p) {
			out = append(out, p)
		}
	}
	if fileExists(path) {
		out = append(out, path)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// copySkipping writes file f to w after skipping skip bytes, and returns
// what is left to skip.
func copySkipping(w io.Writer, f string, skip int64) int64 {
	file, err := os.Open(f)
	if err != nil {
		return skip
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return skip
	}
	if skip >= info.Size() {
		return skip - info.Size()
	}
	if _, err := file.Seek(skip, io.SeekStart); err != nil {
		return 0
	}
	_, _ = io.Copy(w, file)
	return 0
}

// isRunning reports whether this agent runs the attempt now.
func (a *Agent) isRunning(attempt string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.running[attempt]
	return ok
}
