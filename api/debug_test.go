package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDebugProfilesOnlyWhenEnabled: /debug/pprof/ is a 404 by default and
// serves the profile index once WithDebug is set.
func TestDebugProfilesOnlyWhenEnabled(t *testing.T) {
	get := func(h http.Handler) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		return rec
	}
	if rec := get(NewHandler(nil, nil)); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("without debug: %d %s", rec.Code, rec.Body)
	}
	if rec := get(NewHandler(nil, nil).WithDebug()); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("with debug: %d %s", rec.Code, rec.Body)
	}
}
