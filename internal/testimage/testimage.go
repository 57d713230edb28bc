// Package testimage builds small OCI images for tests: layers of files,
// directories and links, images of layers, and the files of a busybox
// root. Nothing here is used outside tests.
package testimage

import (
	"archive/tar"
	"bytes"
	"io"
	"path"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of a layer.
type File struct {
	Name, Body string
	// Link is a symbolic link's target (with Type tar.TypeSymlink).
	Link string
	// Type is the tar type flag; zero is a regular file.
	Type byte
	// Mode defaults to 0644 for a file, 0755 for a directory and 0777
	// for a link.
	Mode int64
}

// Layer is an uncompressed layer of files, in their order.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Typeflag: f.Type, Mode: 0o644, Linkname: f.Link}
		switch h.Typeflag {
		case 0:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Body))
		case tar.TypeReg:
			h.Size = int64(len(f.Body))
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeSymlink:
			h.Mode = 0o777
		}
		if f.Mode != 0 {
			h.Mode = f.Mode
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(f.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is an image of layers, with env (KEY=VALUE) in its config.
func Image(t testing.TB, env []string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	if env != nil {
		if img, err = mutate.Config(img, v1.Config{Env: env}); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// WithParents is files with the directories above each, that files do
// not hold already, placed before them.
func WithParents(files ...File) []File {
	have := map[string]bool{}
	for _, f := range files {
		have[path.Clean(f.Name)] = true
	}
	var out []File
	for _, f := range files {
		var dirs []string
		for d := path.Dir(path.Clean(f.Name)); d != "." && d != "/" && !have[d]; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
			have[d] = true
		}
		for _, d := range dirs {
			out = append(out, File{Name: d + "/", Type: tar.TypeDir})
		}
		out = append(out, f)
	}
	return out
}

// Busybox is the files of a root whose bin/ holds busybox (the bytes of
// a static one) and a link to it for each applet.
func Busybox(bb []byte, applets ...string) []File {
	files := []File{{Name: "bin/", Type: tar.TypeDir}, {Name: "bin/busybox", Body: string(bb), Mode: 0o755}}
	for _, a := range applets {
		files = append(files, File{Name: "bin/" + a, Type: tar.TypeSymlink, Link: "busybox"})
	}
	return files
}
