package httpapi

import (
	"errors"
	"fmt"
	"herd/api"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"herd/internal/ui"
)

// The dashboard's files are public: they hold no data, and every read the
// page makes is an API call carrying the token the operator enters.
func (h *Handler) uiRoutes() []route {
	return []route{
		{http.MethodGet, "/ui/", local, capPublic, h.getUI},
	}
}

var uiFiles = ui.Files()

// getUI serves the dashboard's embedded files; a file it does not have is
// a JSON 404 like any other.
func (h *Handler) getUI(w http.ResponseWriter, r *http.Request) (any, error) {
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/ui")
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		name = "index.html"
	}
	if _, err := fs.Stat(uiFiles, name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the dashboard has no file %q: %w", name, api.ErrNotFound)
		}
		return nil, fmt.Errorf("dashboard file %q: %w", name, err)
	}
	hd := w.Header()
	// Nothing but this replica: no inline scripts, no other origins.
	hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, uiFiles, name)
	return written, nil
}
