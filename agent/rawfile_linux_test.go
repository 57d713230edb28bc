package agent

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEmptyDirReadsEntriesBeyondTheDots(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, fill func(dir string)) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		fill(dir)
		return dir
	}
	empty := mk("empty", func(string) {})
	withFile := mk("file", func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "out"), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	})
	withDir := mk("dir", func(dir string) {
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o750); err != nil {
			t.Fatal(err)
		}
	})
	emptied := mk("emptied", func(dir string) {
		// Entries made and removed again leave the directory empty.
		for _, n := range []string{"a", "b", "c"} {
			p := filepath.Join(dir, n)
			if err := os.WriteFile(p, nil, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		dir  string
		want bool
	}{
		{empty, true},
		{emptied, true},
		{withFile, false},
		{withDir, false},
		{filepath.Join(root, "missing"), false},
		{filepath.Join(withFile, "out"), false}, // a file, not a directory
	} {
		if got := emptyDir(c.dir); got != c.want {
			t.Errorf("emptyDir(%s) = %v, want %v", filepath.Base(c.dir), got, c.want)
		}
	}
}

func TestReadSmallFileGrowsItsBuffer(t *testing.T) {
	want := bytes.Repeat([]byte("12345 67890\n"), 400) // 4,800 bytes
	path := filepath.Join(t.TempDir(), "procs")
	if err := os.WriteFile(path, want, 0o640); err != nil {
		t.Fatal(err)
	}
	var buf [16]byte
	got, err := readSmallFile(path, buf[:])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the file's %d", len(got), len(want))
	}
	if _, err := readSmallFile(filepath.Join(t.TempDir(), "missing"), buf[:]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v, want it to say it does not exist", err)
	}
}

func TestOutputPipeWriteEndIsBlockingReadEndIsPolled(t *testing.T) {
	r, w, err := outputPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	flags := func(f *os.File) int {
		sc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var fl int
		var ferr error
		if err := sc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
			t.Fatal(err)
		}
		if ferr != nil {
			t.Fatal(ferr)
		}
		return fl
	}
	// The child gets the write end as it is: blocking, as a process's
	// standard output is expected to be.
	if flags(w)&unix.O_NONBLOCK != 0 {
		t.Fatal("the write end is non-blocking")
	}
	if flags(r)&unix.O_NONBLOCK == 0 {
		t.Fatal("the read end is blocking: its reader would hold a thread")
	}
	// A read end in the poller can have its deadline set; a blocking
	// file cannot.
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("the read end is not in the poller: %v", err)
	}
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want hello and the end", got, err)
	}
}
