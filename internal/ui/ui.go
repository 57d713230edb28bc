// Package ui holds the operator dashboard: static files embedded in the
// binary, served by every replica under /ui/. The page reads the same
// HTTP API as the CLI, from the replica that served it, and follows the
// event stream to update without reloads; it needs nothing from outside
// the cluster (no CDN, no build step).
package ui

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// Files are the dashboard's files, index.html at the root.
func Files() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}
