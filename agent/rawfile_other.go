//go:build !linux

package agent

import (
	"io"
	"os"
)

// outputPipe makes the pipe an attempt's output goes through.
func outputPipe() (r, w *os.File, err error) { return os.Pipe() }

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
